package main

import (
	"bytes"
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

// TestVersionDocs: the `sbx version` shown in docs/cli.md has the rows this sbx prints, in its order,
// and the libcontainer it is built with (the rows' values for this host are examples).
func TestVersionDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "```\n$ sbx version\n")
	if !ok {
		t.Fatal("docs/cli.md shows no `$ sbx version`")
	}
	block, _, _ = strings.Cut(block, "```")
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("sbx version: %d %s", code, errb.String())
	}
	rows := func(s string) (names []string, values map[string]string) {
		values = map[string]string{}
		for line := range strings.Lines(s) {
			name, value, _ := strings.Cut(strings.TrimSpace(line), "  ")
			if name == "" {
				continue
			}
			if n, v, ok := strings.Cut(name, " "); ok && len(names) == 0 {
				name, value = n, v // the first row: "sbx VERSION"
			}
			names = append(names, name)
			values[name] = strings.TrimSpace(value)
		}
		return names, values
	}
	docNames, docValues := rows(block)
	names, values := rows(out.String())
	if !slices.Equal(docNames, names) {
		t.Errorf("docs/cli.md's sbx version shows the rows %q, sbx prints %q", docNames, names)
	}
	if docValues["libcontainer"] != values["libcontainer"] {
		t.Errorf("docs/cli.md's sbx version shows libcontainer %s, this sbx is built with %s", docValues["libcontainer"], values["libcontainer"])
	}
}
