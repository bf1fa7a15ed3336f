package netcontract

import (
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
)

// floodQueries is how many queries BenchmarkDNSFlood sends per iteration.
const floodQueries = 1_000_000

// BenchmarkDNSFlood sends a million queries for distinct names nobody allows to the DNS filter from
// inside the sandbox, then does what the observe phase does with the network (DNS log, denied record,
// notes, Compare). It reports how many queries the filter handled, the peak RSS of the process (sbx's
// side and the sender together) and the time of that observe step.
func BenchmarkDNSFlood(b *testing.B) {
	fake := newFake(b)
	for b.Loop() {
		n := setup(b, Config{Net: contractNet(fake)})
		server := resolver(b, n.ResolvConf())
		// The sockets are made on the thread inside the sandbox; goroutines then use them from any thread.
		var conns []net.Conn
		if err := runInFake(n.NetNSPath(), func() {
			for range floodWorkers {
				c, err := net.Dial("udp", server)
				if err != nil {
					b.Fatal(err)
				}
				conns = append(conns, c)
			}
		}); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		flood(conns, floodQueries)
		sent := time.Since(start)
		obs := time.Now()
		r := report.New("flood", []string{"flood"})
		denied, err := n.Denied()
		if err != nil {
			b.Fatal(err)
		}
		r.Network.Denied, r.Network.DNS, r.Notes = denied, n.DNS(), n.Notes()
		policy.Compare(policy.Expect{DeniedIsViolation: true, DNSRefusedIsViolation: true}, r)
		observe := time.Since(obs)
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		b.ReportMetric(float64(n.dns.log.total), "queries-handled")
		b.ReportMetric(float64(ru.Maxrss)/1024, "peak-rss-MB")
		b.ReportMetric(float64(observe.Microseconds())/1000, "observe-ms")
		b.ReportMetric(sent.Seconds(), "flood-s")
		b.ReportMetric(float64(len(r.Network.DNS)), "dns-entries")
		n.Close()
	}
}

// floodWorkers is the number of sockets the flood uses.
const floodWorkers = 16

// flood sends count queries for distinct names over conns, in bursts of 32 per socket that each wait for
// their answers (or 50 ms), so that the filter, not the socket buffers, decides the pace. It closes conns.
func flood(conns []net.Conn, count int) {
	const burst = 32
	var wg sync.WaitGroup
	for w, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			buf := make([]byte, 512)
			for i := w; i < count; i += len(conns) * burst {
				for j := 0; j < burst && i+j*len(conns) < count; j++ {
					m := new(dns.Msg).SetQuestion(fmt.Sprintf("f%d.flood.test.", i+j*len(conns)), dns.TypeA)
					p, _ := m.Pack()
					c.Write(p)
				}
				c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
				for range burst {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
}
