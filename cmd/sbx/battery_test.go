package main

// The regression battery (testdata/battery). The testscript commands its cases and the scripts use are
// in scriptcmds_test.go.

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestBattery runs the regression battery: one txtar file per known-bad or known-good command in
// testdata/battery, each saying in its header what it must produce (detected, blocked or pass).
func TestBattery(t *testing.T) {
	testscript.Run(t, scriptParams(filepath.Join("testdata", "battery"), "battery-"))
}

// TestBatteryManifest checks that every battery case is named for what it is (bad_ or good_) and says
// what it must produce, so that the battery stays a readable list of known-bad and known-good commands.
func TestBatteryManifest(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "battery", "*.txtar"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no battery cases: %v", err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(name, "bad_") && !strings.HasPrefix(name, "good_") {
			t.Errorf("%s: name must start with bad_ or good_", name)
		}
		for _, field := range []string{"# class: ", "# must: "} {
			if !bytes.Contains(data, []byte("\n"+field)) && !bytes.HasPrefix(data, []byte(field)) {
				t.Errorf("%s: header lacks %q", name, field)
			}
		}
	}
}
