package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProfileValidate proves validate prints "FILE: ok" for a good file, the file:line:col error and
// its hint for a misspelled key, and returns errInvalidProfile when any file is bad.
func TestProfileValidate(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("version: 1\nextends: default\n"), 0o644)
	os.WriteFile(bad, []byte("version: 1\nname: x\nnetwrok:\n  mode: none\n"), 0o644)
	var out, errw bytes.Buffer
	err := profileValidate(&out, &errw, []string{good, bad})
	if !errors.Is(err, errInvalidProfile) {
		t.Fatalf("err = %v, want errInvalidProfile", err)
	}
	if out.String() != good+": ok\n" {
		t.Errorf("stdout = %q", out.String())
	}
	want := "sbx: error: " + bad + ":3:1: unknown field \"netwrok\"\nsbx: hint: did you mean \"network\"?\n"
	if errw.String() != want {
		t.Errorf("stderr = %q, want %q", errw.String(), want)
	}
}

func TestProfileListAndShow(t *testing.T) {
	var out bytes.Buffer
	if err := profileList(&out, false); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"default", "contract", "strict", "python-build", "node-build"} {
		if !strings.Contains(out.String(), name+" ") {
			t.Errorf("list lacks %s:\n%s", name, out.String())
		}
	}
	out.Reset()
	if err := profileShow(&out, "contract"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "mode: contract") || strings.Contains(out.String(), "extends:") {
		t.Errorf("show contract is not resolved:\n%s", out.String())
	}
}
