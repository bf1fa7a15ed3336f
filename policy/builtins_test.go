package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestBuiltinsLoadCompileAndRoundTrip: every built-in profile loads, survives Marshal and Parse unchanged,
// and compiles to a plan with a sound seccomp filter.
func TestBuiltinsLoadCompileAndRoundTrip(t *testing.T) {
	names := Builtins()
	for _, want := range []string{"agent", "contract", "default", "node-build", "python-build", "strict"} {
		if !slices.Contains(names, want) {
			t.Errorf("built-in %q missing from %v", want, names)
		}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			p, err := Load(name)
			if err != nil {
				t.Fatal(err)
			}
			if p.Name != name || p.Description == "" {
				t.Errorf("name %q description %q", p.Name, p.Description)
			}
			text, err := p.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			back, err := Parse("show", text)
			if err != nil {
				t.Fatalf("marshalled profile does not parse: %v\n%s", err, text)
			}
			if err := back.Validate(); err != nil {
				t.Fatal(err)
			}
			again, _ := back.Marshal()
			if diff := cmp.Diff(string(text), string(again)); diff != "" {
				t.Errorf("round trip changed the profile:\n%s", diff)
			}
			plan, err := Compile(p, CompileContext{Cwd: "/work", CallerEnv: []string{"PATH=/bin"}})
			if err != nil {
				t.Fatal(err)
			}
			if plan.Profile != name || plan.Seccomp == nil {
				t.Errorf("plan profile %q seccomp %v", plan.Profile, plan.Seccomp != nil)
			}
			// Without overrides, the hash is that of what sbx profile show prints.
			if sum := sha256.Sum256(text); plan.Hash() != hex.EncodeToString(sum[:]) {
				t.Errorf("plan hash %q, the profile's sha256 %x", plan.Hash(), sum)
			}
			checkSeccompPlan(t, plan.Seccomp)
		})
	}
}
