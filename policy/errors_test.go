package policy

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestGoldenErrors proves that each bad profile in testdata/errors fails Load with the exact one-line
// error (file:line:col: msg) and hint stored next to it in NAME.golden.
func TestGoldenErrors(t *testing.T) {
	files, _ := filepath.Glob("testdata/errors/*.yaml")
	if len(files) == 0 {
		t.Fatal("no test profiles")
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			_, err := Load(file)
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			got := err.Error() + "\nhint: " + Hint(err) + "\n"
			if strings.Contains(got, "secret-value") {
				t.Errorf("error echoes an env value: %s", got)
			}
			golden := strings.TrimSuffix(file, ".yaml") + ".golden"
			if *update {
				os.WriteFile(golden, []byte(got), 0o644)
			}
			want, _ := os.ReadFile(golden)
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMisspelledTopLevelKey is the acceptance test: the error names the key and its line.
func TestMisspelledTopLevelKey(t *testing.T) {
	_, err := Parse("myprofile.yaml", []byte("version: 1\nname: x\nnetwrok:\n  mode: none\n"))
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want *Error", err)
	}
	if pe.Error() != `myprofile.yaml:3:1: unknown field "netwrok"` || pe.Hint != `did you mean "network"?` {
		t.Errorf("got %q hint %q", pe.Error(), pe.Hint)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Error("unknown field does not match ErrInvalid")
	}
}

func TestErrorKinds(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("a.yaml", "version: 1\nextends: b.yaml\n")
	write("b.yaml", "version: 1\nextends: ./a.yaml\n")
	write("self.yaml", "version: 1\nextends: self.yaml\n")
	tests := []struct {
		name    string
		load    string
		want    error
		wantMsg string
	}{
		{"missing builtin", "nosuch", ErrNotFound, `no built-in profile "nosuch"`},
		{"missing file", filepath.Join(dir, "nosuch.yaml"), ErrNotFound, "no such file"},
		{"cycle of two", filepath.Join(dir, "a.yaml"), ErrCycle, "extends cycle: " + filepath.Join(dir, "a.yaml") + " → " + filepath.Join(dir, "b.yaml") + " → " + filepath.Join(dir, "a.yaml")},
		{"self cycle", filepath.Join(dir, "self.yaml"), ErrCycle, "extends cycle"},
		{"syntax", "testdata/errors/yaml-syntax.yaml", ErrSyntax, "did not find expected"},
		{"binary", "testdata/errors/binary.yaml", ErrSyntax, "not a text file"},
		{"directory", dir + "/", ErrInvalid, "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.load)
			if err == nil {
				t.Fatal("no error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want Is %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("err = %q, want it to contain %q", err, tt.wantMsg)
			}
		})
	}
	if !errors.Is(ErrCycle, ErrInvalid) || !errors.Is(ErrSyntax, ErrInvalid) {
		t.Error("ErrCycle and ErrSyntax must match ErrInvalid")
	}
}
