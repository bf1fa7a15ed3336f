package netcontract

import (
	"fmt"
	"sync"

	"github.com/sbx-dev/sbx/report"
)

// Bounds of the DNS log. A sandbox can send a million queries in seconds; sbx's memory and the report
// must not grow with them. The first maxDNSEntries queries are listed one by one; later ones are counted
// per distinct (name, type, verdict, reason) for up to maxDNSCounted of them, refused ones for up to
// twice that; the rest only counted.
const (
	maxDNSEntries = 1000
	maxDNSCounted = 1000
)

// dnsLog is the bounded record of what the DNS filter saw. Safe for concurrent use.
type dnsLog struct {
	mu      sync.Mutex
	entries []report.DNSQuery
	counted map[report.DNSQuery]int
	order   []report.DNSQuery // keys of counted, in first-seen order
	dropped int               // queries neither listed nor counted per name
	total   int               // every query logged
	foreign int               // messages from an address other than the sandbox's, dropped unanswered
}

// add records one query.
func (l *dnsLog) add(q report.DNSQuery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	if len(l.entries) < maxDNSEntries {
		l.entries = append(l.entries, q)
		return
	}
	if l.counted == nil {
		l.counted = map[report.DNSQuery]int{}
	}
	if _, ok := l.counted[q]; !ok {
		// A refused query is kept past the bound for others (to twice it): the report judges refused
		// queries by the log, and a flood of distinct allowed ones (one name, every query type) pushed
		// a refused one, an exfiltration attempt, out of it; the run passed.
		if len(l.order) >= maxDNSCounted && (q.Allowed || len(l.order) >= 2*maxDNSCounted) {
			l.dropped++
			return
		}
		l.order = append(l.order, q)
	}
	l.counted[q]++
}

// addForeign counts a message that did not come from the sandbox.
func (l *dnsLog) addForeign() {
	l.mu.Lock()
	l.foreign++
	l.mu.Unlock()
}

// queries is the listed entries, then the counted ones with their counts.
func (l *dnsLog) queries() []report.DNSQuery {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]report.DNSQuery, 0, len(l.entries)+len(l.order))
	out = append(out, l.entries...)
	for _, q := range l.order {
		q.Count = l.counted[q]
		out = append(out, q)
	}
	return out
}

// notes says where the log is incomplete, and what it dropped that was not the sandbox's.
func (l *dnsLog) notes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	if len(l.order) > 0 {
		out = append(out, fmt.Sprintf("DNS log: queries past the first %d are counted per name", maxDNSEntries))
	}
	if l.dropped > 0 {
		out = append(out, fmt.Sprintf("DNS log: %d further queries, past %d distinct names, were answered but not itemized", l.dropped, maxDNSCounted))
	}
	if l.foreign > 0 {
		out = append(out, fmt.Sprintf("DNS filter: %d messages from addresses other than the sandbox's were dropped unanswered (not the command's)", l.foreign))
	}
	return out
}
