package report

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestListsNeverNull: after FillLists, a report whose lists were left nil, at the top (files.details) and inside
// entries (an incomplete exec's argv, a process's fds), encodes each as [], never null.
func TestListsNeverNull(t *testing.T) {
	for name, r := range map[string]*Report{
		"zero":   {},
		"new":    New("default", nil),
		"nested": {Processes: Processes{Execs: []Exec{{Pid: 2, Incomplete: true}}, LeftRunning: []Process{{Pid: 3}}}},
	} {
		r.FillLists()
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "null") {
			t.Errorf("%s: %s", name, b)
		}
	}
	r := &Report{Processes: Processes{Execs: []Exec{{Pid: 2, Incomplete: true}}}}
	r.FillLists()
	b, _ := json.Marshal(r)
	for _, want := range []string{`"argv":[]`, `"details":[]`, `"violations":[]`, `"notes":[]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
}

// TestFillListsKeepsEmbedders: a type that embeds Report (the MCP server's run output) still encodes its
// own fields.
func TestFillListsKeepsEmbedders(t *testing.T) {
	type withID struct {
		Report
		ID string `json:"id"`
	}
	b, err := json.Marshal(withID{Report: *New("default", nil), ID: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"id":"run-1"`) {
		t.Errorf("the embedder's field is lost: %s", b)
	}
}
