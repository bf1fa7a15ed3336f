package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/runner"
	"github.com/sbx-dev/sbx/sandbox"
)

// TestHintFor: a wrapped error of sbx's packages finds its hint; a profile error its own; the first row
// that matches wins; an error nobody knows gets none.
func TestHintFor(t *testing.T) {
	typo := filepath.Join(t.TempDir(), "typo.yaml")
	if err := os.WriteFile(typo, []byte("version: 1\nnetwrok: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, perr := policy.Load(typo)
	tests := []struct {
		name string
		err  error
		want string // a part of the hint; "" for none
	}{
		{"share", fmt.Errorf("sharing /x: %w", sandbox.ErrShare), "must exist on the host"},
		{"changes", fmt.Errorf("copying: %w", runner.ErrChangesDir), "outside every --rw share"},
		{"profile", fmt.Errorf("loading: %w", perr), `did you mean "network"?`},
		{"setup", fmt.Errorf("building: %w", sandbox.ErrSetup), "sbx gc"},
		{"first match", errors.Join(sandbox.ErrNoCgroup, sandbox.ErrSetup), "limits.require"},
		{"userns restricted", fmt.Errorf("%w: %w", sandbox.ErrSetup, sandbox.ErrUsernsRestricted), "sudo make install-apparmor"},
		{"unknown", errors.New("something else"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := hintFor(tt.err)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("hintFor(%v) = %q, want one with %q", tt.err, got, tt.want)
			}
		})
	}
	if os.Geteuid() == 0 && !strings.Contains(hintFor(os.ErrPermission), "run it as root") {
		t.Errorf("as root, a permission error's hint is %q", hintFor(os.ErrPermission))
	}
}

// TestPrintError: one error line, newlines folded, then the hint line when there is one.
func TestPrintError(t *testing.T) {
	var b bytes.Buffer
	printError(&b, errors.New("first\nsecond"), "do this")
	if got, want := b.String(), "sbx: error: first; second\nsbx: hint: do this\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	b.Reset()
	printError(&b, errors.New("alone"), "")
	if got, want := b.String(), "sbx: error: alone\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestHintUsernsRestricted: a rootless start refused by AppArmor's restriction of user namespaces is a
// setup failure (125) of one error line, which names the cause, and one hint line, which names the fix.
func TestHintUsernsRestricted(t *testing.T) {
	err := fmt.Errorf("%w: %w: building the sandbox: making / a slave: permission denied", sandbox.ErrSetup, sandbox.ErrUsernsRestricted)
	if ee := setupError(err, ""); ee.code != exitSetup {
		t.Errorf("exit status %d, want %d", ee.code, exitSetup)
	}
	var b bytes.Buffer
	printError(&b, err, hintFor(err))
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "sbx: error: ") || !strings.Contains(lines[0], "kernel.apparmor_restrict_unprivileged_userns=1") ||
		!strings.HasPrefix(lines[1], "sbx: hint: ") || !strings.Contains(lines[1], "install-apparmor") || !strings.Contains(lines[1], "as root") {
		t.Errorf("printed %q, want an error line naming the restriction and a hint naming the profile and root", b.String())
	}
}
