package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/profiles"
)

func TestParseDest(t *testing.T) {
	tests := []struct {
		in      string
		want    NetRule
		wantErr string
	}{
		{in: "pypi.org:443", want: NetRule{Host: "pypi.org", Proto: "tcp", Port: 443}},
		{in: "udp:dns.example:53", want: NetRule{Host: "dns.example", Proto: "udp", Port: 53}},
		{in: "*.example.com:443", want: NetRule{Host: "*.example.com", Proto: "tcp", Port: 443}},
		{in: "Example.COM.:*", want: NetRule{Host: "example.com", Proto: "tcp"}},
		{in: "203.0.113.7:443", want: NetRule{CIDR: "203.0.113.7/32", Proto: "tcp", Port: 443}},
		{in: "203.0.113.7", want: NetRule{CIDR: "203.0.113.7/32", Proto: "tcp"}},
		{in: "[2001:db8::1]:443", want: NetRule{CIDR: "2001:db8::1/128", Proto: "tcp", Port: 443}},
		{in: "2001:db8::1", want: NetRule{CIDR: "2001:db8::1/128", Proto: "tcp"}},
		{in: "10.0.0.0/8:5432", want: NetRule{CIDR: "10.0.0.0/8", Proto: "tcp", Port: 5432}},
		{in: "[2001:db8::/32]:443", want: NetRule{CIDR: "2001:db8::/32", Proto: "tcp", Port: 443}},
		{in: "::ffff:192.0.2.1", want: NetRule{CIDR: "192.0.2.1/32", Proto: "tcp"}},
		{in: "[::ffff:10.0.0.0/104]:443", want: NetRule{CIDR: "10.0.0.0/8", Proto: "tcp", Port: 443}},
		{in: "Pypi.ORG:443", want: NetRule{Host: "pypi.org", Proto: "tcp", Port: 443}},
		{in: "\u212aey.test:443", wantErr: "not a host name"},
		{in: "10.0.0.1.:443", wantErr: "last label is all digits"},
		{in: "host.example:8000-8100", want: NetRule{Host: "host.example", Proto: "tcp", Port: 8000, PortEnd: 8100}},
		{in: "example.com", wantErr: "has no port"},
		{in: "example.com:0", wantErr: "is not a port"},
		{in: "example.com:70000", wantErr: "is not a port"},
		{in: "example.com:9-3", wantErr: "runs backwards"},
		{in: "2001:db8::1:443x", wantErr: "ambiguous"},
		{in: "10.0.0.1/8:22", wantErr: "outside its mask"},
		{in: "bad_host!:80", wantErr: "not a host name"},
		{in: "", wantErr: "empty destination"},
		{in: "[::1", wantErr: "missing ]"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDest(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			back, err := ParseDest(got.String())
			if err != nil || back != got {
				t.Errorf("String() %q does not round trip: %+v %v", got.String(), back, err)
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		bad  bool
	}{
		{in: "64MiB", want: 64 << 20}, {in: "64Mi", want: 64 << 20}, {in: "64M", want: 64 << 20},
		{in: "64mb", want: 64 << 20}, {in: "1GiB", want: 1 << 30}, {in: "1G", want: 1 << 30},
		{in: "1.5GiB", want: 3 << 29}, {in: "4096", want: 4096}, {in: "10KiB", want: 10240}, {in: "0", want: 0},
		{in: "lots", bad: true}, {in: "MiB", bad: true}, {in: "1XB", bad: true}, {in: "99999999999T", bad: true},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, bad %v", tt.in, got, err, tt.want, tt.bad)
		}
		if !tt.bad {
			if back, _ := ParseSize(FormatSize(got)); back != got {
				t.Errorf("FormatSize(%d) = %q does not round trip", got, FormatSize(got))
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/errors/*.yaml")
	for _, s := range seeds {
		data, _ := os.ReadFile(s)
		f.Add(data)
	}
	for _, name := range profiles.Names() {
		data, _ := os.ReadFile(filepath.Join("..", "profiles", name+".yaml"))
		f.Add(data)
	}
	f.Add([]byte("version: 1\nnetwork: {mode: contract, allow: [{host: a.b, ports: 1-2, proto: udp}], dns: {upstream: '1.1.1.1:53'}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.yaml", data)
		if err != nil {
			if Hint(err) == "" && err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if p.Validate() != nil {
			return
		}
		text, err := p.Marshal()
		if err != nil {
			t.Fatalf("valid profile does not marshal: %v", err)
		}
		q, err := Parse("fuzz.yaml", text)
		if err != nil {
			t.Fatalf("marshalled profile does not parse: %v\n%s", err, text)
		}
		if err := q.Validate(); err != nil {
			t.Fatalf("marshalled profile does not validate: %v\n%s", err, text)
		}
	})
}
