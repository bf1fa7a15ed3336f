package policy

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sbx-dev/sbx/profiles"
)

// FuzzParse: Parse never fails without an error to show, and a valid profile survives Marshal and Parse.
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
