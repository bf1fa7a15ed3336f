package sandbox

import (
	"errors"
	"strings"
	"testing"
)

// TestLocalhost6 checks that the sandbox's localhost is ::1 exactly when the host's is.
func TestLocalhost6(t *testing.T) {
	for _, c := range []struct {
		name  string
		hosts string
		err   error
		want  bool
	}{
		{"debian", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n", nil, true},
		{"v4 only", "127.0.0.1 localhost\n127.0.0.1 vm\n", nil, false},
		{"ip6-localhost only", "127.0.0.1 localhost\n::1 ip6-localhost ip6-loopback\n", nil, false},
		{"commented", "127.0.0.1 localhost\n# ::1 localhost\n::1 ip6-loopback # localhost\n", nil, false},
		{"long form", "0:0:0:0:0:0:0:1 localhost\n", nil, true},
		{"unreadable", "", errors.New("no file"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := localhost6([]byte(c.hosts), c.err)
			if got != c.want {
				t.Fatalf("localhost6 = %v, want %v", got, c.want)
			}
			content := hostsContent(got)
			if has := strings.Contains(content, "::1\tlocalhost "); has != c.want {
				t.Fatalf("hosts file maps localhost to ::1: %v, want %v:\n%s", has, c.want, content)
			}
			if !strings.Contains(content, "127.0.0.1\tlocalhost\n") || !strings.Contains(content, "\t"+Hostname+"\n") {
				t.Fatalf("hosts file lacks localhost or the sandbox's name:\n%s", content)
			}
		})
	}
}
