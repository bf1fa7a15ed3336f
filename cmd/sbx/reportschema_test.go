package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/report/schema"
)

// TestExecReportsMatchSchema: the JSON report that sbx exec --json writes, for a pass, leftovers, file
// changes, a timeout and a command that is not there, validates against the report's JSON Schema
// (report/schema.json, sbx report schema).
func TestExecReportsMatchSchema(t *testing.T) {
	testutil.RequireRoot(t, "sbx exec creates namespaces, cgroups and mounts")
	root := filepath.Join(testStateParent(), "schema-"+filepath.Base(t.TempDir()))
	t.Setenv(stateRootEnv, root)
	t.Cleanup(func() { testutil.RemoveStateRoot(root) })
	tests := []struct {
		name    string
		flags   []string
		command []string
		status  int
	}{
		{"pass", nil, []string{"sh", "-c", "echo hi; sh -c true"}, 0},
		{"leftovers", nil, []string{"sh", "-c", "sleep 30 & exit 0"}, exitViolation},
		{"files", nil, []string{"sh", "-c", "mkdir /tmp/d && echo x > /tmp/d/f && ln -s f /tmp/d/l"}, 0},
		{"timeout", []string{"--timeout", "300ms"}, []string{"sleep", "10"}, exitTimeout},
		{"not found", nil, []string{"/nonexistent/cmd"}, exitNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "r.json")
			args := slices.Concat([]string{"exec", "-q", "--json", file}, tt.flags, []string{"--"}, tt.command)
			var out, errb bytes.Buffer
			if code := run(args, nil, &out, &errb); code != tt.status {
				t.Fatalf("sbx %v: status %d, want %d; stderr %s", args, code, tt.status, errb.String())
			}
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Validate(b); err != nil {
				t.Errorf("%v\n%s", err, b)
			}
		})
	}
}
