package netcontract

import (
	"net"
	"slices"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
)

// TestIngress: a listener of the command is not reachable from the uplink side unless network.ingress
// opens its port; the refused attempt is recorded as inbound, with the sender's address.
func TestIngress(t *testing.T) {
	fake := newFake(t)
	for _, tc := range []struct {
		name    string
		ingress []policy.Listener
		want    bool // reachable
	}{
		{"closed by default", nil, false},
		{"opened by network.ingress", []policy.Listener{{Proto: "tcp", Port: 8080}}, true},
		{"another port opened", []policy.Listener{{Proto: "tcp", Port: 9090}, {Proto: "udp"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw := contractNet(fake)
			nw.Ingress = tc.ingress
			n := setup(t, Config{Net: nw})
			var ln net.Listener
			in(t, n, func() {
				var err error
				if ln, err = net.Listen("tcp4", ":8080"); err != nil {
					t.Fatal(err)
				}
			})
			defer ln.Close()
			go func() {
				for c, err := ln.Accept(); err == nil; c, err = ln.Accept() {
					c.Write([]byte("hello from the sandbox"))
					c.Close()
				}
			}()
			target := net.JoinHostPort(n.link.addrs().sbx4.Addr().String(), "8080")
			var got bool
			if err := runInFake(fake.Path, func() {
				c, err := net.DialTimeout("tcp4", target, time.Second)
				if err == nil {
					c.SetDeadline(time.Now().Add(time.Second))
					_, err = c.Read(make([]byte, 32))
					c.Close()
				}
				got = err == nil
			}); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("the sandbox's listener from the uplink side: reachable = %v, want %v", got, tc.want)
			}
			denied, err := n.Denied()
			if err != nil {
				t.Fatal(err)
			}
			recorded := slices.ContainsFunc(denied, func(d report.Denied) bool {
				return d.Direction == report.DirectionIn && d.Port == 8080 && d.Address == n.link.addrs().peer4.Addr().String()
			})
			if recorded == tc.want {
				t.Errorf("inbound record %+v: recorded = %v, want %v", denied, recorded, !tc.want)
			}
		})
	}
}
