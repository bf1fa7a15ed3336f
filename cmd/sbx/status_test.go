package main

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestExitStatusDocs: docs/cli.md's table "Exit status of sbx exec" lists exactly the statuses of
// execStatuses (beside the command's own), and exec's help text names each of them.
func TestExitStatusDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Exit status of `sbx exec`\n")
	if !ok {
		t.Fatal("docs/cli.md has no section \"Exit status of `sbx exec`\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var documented []int
	for _, m := range regexp.MustCompile(`(?m)^\| (\d+) \|`).FindAllStringSubmatch(section, -1) {
		n, _ := strconv.Atoi(m[1])
		documented = append(documented, n)
	}
	var want []int
	help := execStatusHelp()
	for _, s := range execStatuses {
		want = append(want, s.code)
		if !strings.Contains(help, " "+strconv.Itoa(s.code)+" ") {
			t.Errorf("exec's help does not name status %d:\n%s", s.code, help)
		}
	}
	slices.Sort(documented)
	slices.Sort(want)
	if !slices.Equal(documented, want) {
		t.Errorf("docs/cli.md documents exit statuses %v, sbx exec gives %v", documented, want)
	}
}
