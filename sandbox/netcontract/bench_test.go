package netcontract

import (
	"testing"
	"time"

	"github.com/sbx-dev/sbx/policy"
)

// BenchmarkSetupClose measures what a run pays for its network: mode none (a namespace with lo) against
// mode contract (plumbing, contract, DNS filter) with a fake uplink. setup-ms and close-ms split the cost.
func BenchmarkSetupClose(b *testing.B) {
	fake := newFake(b)
	for _, bc := range []struct {
		name string
		nw   policy.Network
	}{
		{"none", policy.Network{Mode: policy.NetNone}},
		{"contract", contractNet(fake)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			dir := b.TempDir()
			var setupT, closeT time.Duration
			for b.Loop() {
				start := time.Now()
				n, err := Setup(Config{ID: testID(), Net: bc.nw, StateDir: dir})
				if err != nil {
					b.Fatal(err)
				}
				mid := time.Now()
				if err := n.Close(); err != nil {
					b.Fatal(err)
				}
				setupT += mid.Sub(start)
				closeT += time.Since(mid)
			}
			b.ReportMetric(float64(setupT.Microseconds())/1000/float64(b.N), "setup-ms")
			b.ReportMetric(float64(closeT.Microseconds())/1000/float64(b.N), "close-ms")
		})
	}
}
