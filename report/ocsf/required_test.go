package ocsf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/observe"
	"github.com/sbx-dev/sbx/report"
)

// schemaRules are the required attributes and constraints of OCSF 1.3.0, per class uid and per object
// name, with which attributes hold which objects (testdata/extract.py writes them from the schema).
type schemaRules struct {
	Version string           `json:"version"`
	Classes map[string]rules `json:"classes"`
	Objects map[string]rules `json:"objects"`
}

type rules struct {
	Required    []string            `json:"required"`
	Constraints map[string][]string `json:"constraints"`
	Objects     map[string]string   `json:"objects"`
}

func loadRules(t *testing.T) schemaRules {
	t.Helper()
	data, err := os.ReadFile("testdata/ocsf-1.3.0-required.json")
	if err != nil {
		t.Fatal(err)
	}
	var s schemaRules
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// check returns the breaches of r in the object v at path, and of the objects inside it.
func (s schemaRules) check(path string, r rules, v map[string]any) []string {
	var bad []string
	for _, k := range r.Required {
		if _, ok := v[k]; !ok {
			bad = append(bad, fmt.Sprintf("%s.%s is required", path, k))
		}
	}
	for kind, keys := range r.Constraints {
		n := 0
		for _, k := range keys {
			if _, ok := v[k]; ok {
				n++
			}
		}
		if (kind == "at_least_one" && n == 0) || (kind == "just_one" && n != 1) {
			bad = append(bad, fmt.Sprintf("%s: %s of %v, found %d", path, kind, keys, n))
		}
	}
	for k, obj := range r.Objects {
		if child, ok := v[k].(map[string]any); ok {
			bad = append(bad, s.check(path+"."+k, s.Objects[obj], child)...)
		}
	}
	return bad
}

// fullReport has one of everything the converter turns into an event.
func fullReport() *report.Report {
	r := report.New("contract", []string{"sh", "-c", "x"})
	r.Verdict = report.VerdictViolation
	r.Processes.Execs = []observe.Exec{{Pid: 2, PPid: 1, Exe: "/usr/bin/curl", Argv: []string{"curl", "http://169.254.169.254/"}}}
	r.Processes.LeftRunning = []observe.Process{{Pid: 3, PPid: 1, Exe: "/usr/bin/sleep", Argv: []string{"sleep", "300"}}}
	r.Network.Denied = []report.Denied{{Proto: "tcp", Address: "169.254.169.254", Port: 80, Count: 2}}
	r.Network.DNS = []report.DNSQuery{{Name: "evil.example", Type: "A"}, {Name: "pypi.org", Type: "A", Allowed: true}}
	r.Files.Created = []string{"/tmp/a"}
	r.Files.Modified = []string{"/tmp/c"}
	r.Files.Deleted = []string{"/tmp/b"}
	r.Violations = []report.Violation{{Rule: report.RuleDenied, Message: "denied"}, {Rule: report.RuleLeftRunning, Message: "left"}}
	return r
}

// TestRequiredFields: every event of every class has what OCSF 1.3.0 requires of that class and of each
// object in it (connection_info.direction_id, file.name and type_id, finding_info.uid and title, ...).
func TestRequiredFields(t *testing.T) {
	s := loadRules(t)
	if s.Version != Version {
		t.Fatalf("the rules are of OCSF %s, the events claim %s", s.Version, Version)
	}
	var buf bytes.Buffer
	if err := WriteLines(&buf, Convert(fullReport(), Options{Time: time.Unix(1700000000, 0), Hostname: "h", Version: "t", RunID: "run-1"})); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var ev map[string]any
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatal(err)
		}
		class := fmt.Sprint(ev["class_uid"])
		r, ok := s.Classes[class]
		if !ok {
			t.Errorf("class %s has no rules in testdata: extract them", class)
			continue
		}
		seen[class] = true
		for _, b := range s.check("class "+class, r, ev) {
			t.Error(b)
		}
	}
	for class := range s.Classes {
		if !seen[class] {
			t.Errorf("no event of class %s was checked", class)
		}
	}
}

// TestRequiredFieldsBite: the check finds a missing required attribute, a missing nested one and a
// broken constraint, so that passing means something.
func TestRequiredFieldsBite(t *testing.T) {
	s := loadRules(t)
	net := Convert(fullReport(), Options{Hostname: "h"})
	i := slices.IndexFunc(net, func(e Event) bool { return e["class_uid"] == ClassNetwork })
	for name, mutate := range map[string]func(map[string]any){
		"time":         func(e map[string]any) { delete(e, "time") },
		"direction_id": func(e map[string]any) { delete(e["connection_info"].(map[string]any), "direction_id") },
		"endpoint":     func(e map[string]any) { e["dst_endpoint"] = map[string]any{"port": 80} },
	} {
		b, _ := json.Marshal(net[i])
		var ev map[string]any
		_ = json.Unmarshal(b, &ev)
		mutate(ev)
		if bad := s.check("event", s.Classes["4001"], ev); len(bad) != 1 {
			t.Errorf("%s: %d breaches found (%v), want 1", name, len(bad), bad)
		}
	}
}
