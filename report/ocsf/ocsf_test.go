package ocsf

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/report"
)

// TestConvert: each observation becomes an event of its class, each violation one finding, and every
// event carries the attributes OCSF requires of all classes.
func TestConvert(t *testing.T) {
	r := report.New("contract", []string{"sh", "-c", "x"})
	r.Verdict = report.VerdictViolation
	r.Processes.Execs = []report.Exec{{Pid: 2, PPid: 1, Exe: "/usr/bin/curl", Argv: []string{"curl", "http://169.254.169.254/"}}}
	r.Processes.LeftRunning = []report.Process{{Pid: 3, PPid: 1, Exe: "/usr/bin/sleep", Argv: []string{"sleep", "300"}}}
	r.Network.Denied = []report.Denied{{Proto: "tcp", Address: "169.254.169.254", Port: 80, Count: 2},
		{Proto: "tcp", Address: "10.199.0.5", Port: 8080, Count: 1, Direction: report.DirectionIn}}
	r.Network.DNS = []report.DNSQuery{{Name: "evil.example", Type: "A"}, {Name: "pypi.org", Type: "A", Allowed: true}}
	r.Files.Created = []string{"/tmp/a"}
	r.Files.Deleted = []string{"/tmp/b"}
	r.Violations = []report.Violation{{Rule: report.RuleDenied, Message: "denied"}, {Rule: report.RuleLeftRunning, Message: "left"}}

	var buf bytes.Buffer
	if err := WriteLines(&buf, Convert(r, Options{Time: time.Unix(1700000000, 0), Hostname: "h", Version: "t", RunID: "run-1"})); err != nil {
		t.Fatal(err)
	}
	count := map[float64]int{}
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		for _, k := range []string{"class_uid", "category_uid", "activity_id", "type_uid", "time", "severity_id", "metadata"} {
			if _, ok := e[k]; !ok {
				t.Errorf("event %v lacks %s", e["class_uid"], k)
			}
		}
		if e["type_uid"] != e["class_uid"].(float64)*100+e["activity_id"].(float64) {
			t.Errorf("type_uid %v for class %v activity %v", e["type_uid"], e["class_uid"], e["activity_id"])
		}
		count[e["class_uid"].(float64)]++
		if ci, ok := e["connection_info"].(map[string]any); ok && ci["direction"] == "Inbound" {
			if src, _ := e["src_endpoint"].(map[string]any); src["ip"] != "10.199.0.5" {
				t.Errorf("inbound refusal: src_endpoint %v, want the sender", src)
			}
		}
	}
	want := map[float64]int{ClassProcess: 2, ClassNetwork: 2, ClassDNS: 2, ClassFileSystem: 2, ClassDetectionFinding: 2}
	for class, n := range want {
		if count[class] != n {
			t.Errorf("class %v: %d events, want %d", class, count[class], n)
		}
	}
}

// TestConvertPersistence: a planted file names its mechanism, and a refused write that plants
// persistence is a File System Activity with status Failure.
func TestConvertPersistence(t *testing.T) {
	r := report.New("default", []string{"sh"})
	r.Files.Created = []string{"/tmp/.bashrc", "/tmp/notes"}
	r.Persistence = []report.Persistence{
		{Mechanism: "shell start-up file", Path: "/tmp/.bashrc", Change: "created"},
		{Mechanism: "cron", Path: "/etc/cron.d/x", Change: "refused"},
	}
	files := map[string]Event{}
	for _, e := range Convert(r, Options{Time: time.Unix(1700000000, 0)}) {
		if e["class_uid"] == ClassFileSystem {
			files[e["file"].(map[string]any)["path"].(string)] = e
		}
	}
	if len(files) != 3 {
		t.Fatalf("file events for %v, want 3", files)
	}
	if m := files["/tmp/.bashrc"]["unmapped"].(map[string]any)["sbx_persistence"]; m != "shell start-up file" {
		t.Errorf(".bashrc: sbx_persistence %v", m)
	}
	if _, ok := files["/tmp/notes"]["unmapped"].(map[string]any)["sbx_persistence"]; ok {
		t.Errorf("/tmp/notes named as persistence")
	}
	cron := files["/etc/cron.d/x"]
	if cron["status"] != "Failure" || cron["unmapped"].(map[string]any)["sbx_persistence"] != "cron" {
		t.Errorf("refused cron write: %v", cron)
	}
}
