package report

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/observe"
)

// TestListsNeverNull: a report whose lists were left nil, at the top (files.details) and inside
// entries (an incomplete exec's argv, a process's fds), encodes each as [], never null.
func TestListsNeverNull(t *testing.T) {
	for name, r := range map[string]*Report{
		"zero":   {},
		"new":    New("default", nil),
		"nested": {Processes: Processes{Execs: []observe.Exec{{Pid: 2, Incomplete: true}}, LeftRunning: []observe.Process{{Pid: 3}}}},
	} {
		for _, v := range []any{r, *r} {
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "null") {
				t.Errorf("%s: %s", name, b)
			}
		}
	}
	r := &Report{Processes: Processes{Execs: []observe.Exec{{Pid: 2, Incomplete: true}}}}
	b, _ := json.Marshal(r)
	for _, want := range []string{`"argv":[]`, `"details":[]`, `"violations":[]`, `"notes":[]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
}
