package report

import (
	"encoding/json"
	"reflect"
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

// TestNoNullListAtAnyDepth: every slice of the report types, at every depth, encodes as a list after
// FillLists. For each depth k it builds a report whose slices above depth k hold one element and whose
// slices at depth k are nil (a zero report is k = 0), so that a list type added later anywhere in the
// report is covered without naming it here.
func TestNoNullListAtAnyDepth(t *testing.T) {
	for k := range 5 {
		var r Report
		withElements(reflect.ValueOf(&r).Elem(), k)
		r.FillLists()
		b, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "null") {
			t.Errorf("depth %d: %s", k, b)
		}
	}
}

// withElements gives every settable nil slice reachable from v within depth levels of slices one zero
// element, and recurses into it; slices at the last level stay nil.
func withElements(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				withElements(f, depth)
			}
		}
	case reflect.Slice:
		if depth == 0 {
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		withElements(v.Index(0), depth-1)
	}
}
