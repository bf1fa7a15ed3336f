package schema

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/report"
)

func TestSchemaAcceptsNewReport(t *testing.T) {
	r := report.New("default", []string{"true"})
	r.Processes.Execs = append(r.Processes.Execs, report.Exec{Pid: 2, Incomplete: true})
	r.FillLists()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(b); err != nil {
		t.Fatal(err)
	}
}

func TestSchemaRefuses(t *testing.T) {
	b, err := json.Marshal(report.New("default", []string{"true"}))
	if err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(map[string]any){
		"null list":        func(m map[string]any) { m["notes"] = nil },
		"missing field":    func(m map[string]any) { delete(m, "verdict") },
		"wrong schema":     func(m map[string]any) { m["schema"] = "sbx.report/v0" },
		"wrong type":       func(m map[string]any) { m["exit_code"] = "0" },
		"null nested list": func(m map[string]any) { m["files"].(map[string]any)["details"] = nil },
	} {
		t.Run(name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			edit(m)
			doc, _ := json.Marshal(m)
			if err := Validate(doc); err == nil {
				t.Fatalf("a report with a %s validates", name)
			}
		})
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	m["a_field_added_later"] = 1
	doc, _ := json.Marshal(m)
	if err := Validate(doc); err != nil {
		t.Errorf("an added field is refused: %v", err)
	}
}

// TestSchemaFile: the committed report/schema.json, which sbx embeds and prints (sbx report schema), is
// what the generator gives.
func TestSchemaFile(t *testing.T) {
	want, err := Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("report/schema.json is stale: run go generate ./report/schema\n%s", cmp.Diff(string(want), string(got)))
	}
	if !bytes.Equal(report.MarshalSchema(), got) {
		t.Error("report.MarshalSchema does not give report/schema.json")
	}
}
