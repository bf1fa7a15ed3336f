package policy

import (
	"fmt"
	"testing"

	"github.com/sbx-dev/sbx/report"
)

// BenchmarkCompareFlood judges a report holding 200,000 refused DNS queries and as many denied
// destinations, each distinct: Compare de-duplicates its violations, which must stay linear.
func BenchmarkCompareFlood(b *testing.B) {
	const n = 200_000
	r := report.New("flood", []string{"flood"})
	for i := range n {
		r.Network.DNS = append(r.Network.DNS, report.DNSQuery{Name: fmt.Sprintf("x%d.example", i), Type: "A"})
		r.Network.Denied = append(r.Network.Denied, report.Denied{Proto: "udp", Address: "10.0.0.1", Port: i%65535 + 1, Count: 1})
	}
	exp := Expect{DeniedIsViolation: true, DNSRefusedIsViolation: true}
	for b.Loop() {
		Compare(exp, r)
	}
	if len(r.Violations) < n {
		b.Fatalf("%d violations, want at least %d", len(r.Violations), n)
	}
}
