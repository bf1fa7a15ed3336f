// Package ocsf converts an sbx.report/v1 report into Open Cybersecurity Schema Framework (OCSF 1.3)
// events, for security data lakes that ingest OCSF as JSON lines.
//
// One report becomes: a Process Activity (1007) Launch per exec seen and one per process left
// running; a Network Activity (4001) Refuse per destination the contract denied; a DNS Activity
// (4003) Query per DNS query (refused ones with rcode Refused); a File System Activity (1001) per
// created, modified or deleted path (a persistence finding names its mechanism in
// unmapped.sbx_persistence) and one with status Failure per refused write that plants persistence; and
// a Detection Finding (2004) per violation. It is plain data:
// no I/O beyond WriteLines, no validation against the OCSF schema server. The sbx.report/v1 JSON stays
// the primary format; these events lose the report's shape (one verdict, one run) on purpose. The tests
// check every event against the required attributes and constraints of OCSF 1.3.0's classes and objects
// (a table typed by hand in required_test.go).
package ocsf

import (
	"encoding/json"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/sbx-dev/sbx/report"
)

// Version is the OCSF schema version the events claim.
const Version = "1.3.0"

// OCSF class and category ids used here.
const (
	ClassFileSystem       = 1001
	ClassProcess          = 1007
	ClassDetectionFinding = 2004
	ClassNetwork          = 4001
	ClassDNS              = 4003
	categorySystem        = 1
	categoryFindings      = 2
	categoryNetwork       = 4
)

// Event is one OCSF event, ready for json.Marshal.
type Event map[string]any

// Options are what the report does not say.
type Options struct {
	Time     time.Time // when the run ended; zero = now
	Hostname string    // the host sbx ran on
	Version  string    // sbx's version
	RunID    string    // correlates the events of one run (metadata.correlation_uid); "" = none
}

// Convert returns the events of one report, in the order: processes, network, DNS, files, findings.
func Convert(r *report.Report, o Options) []Event {
	if o.Time.IsZero() {
		o.Time = time.Now()
	}
	c := converter{r: r, o: o}
	var out []Event
	out = append(out, c.processes()...)
	out = append(out, c.network()...)
	out = append(out, c.dns()...)
	out = append(out, c.files()...)
	return append(out, c.findings()...)
}

// WriteLines writes events as JSON lines.
func WriteLines(w io.Writer, events []Event) error {
	enc := json.NewEncoder(w)
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}

type converter struct {
	r *report.Report
	o Options
}

// base fills the attributes every OCSF event requires.
func (c converter) base(class, category, activity int, activityName string, t time.Time, severity int) Event {
	if t.IsZero() {
		t = c.o.Time
	}
	meta := map[string]any{
		"version": Version,
		"product": map[string]any{"name": "sbx", "vendor_name": "sbx", "version": c.o.Version},
		"labels":  []string{"profile:" + c.r.Profile},
	}
	if c.o.RunID != "" {
		meta["correlation_uid"] = c.o.RunID
	}
	return Event{
		"class_uid": class, "category_uid": category, "activity_id": activity, "activity_name": activityName,
		"type_uid": class*100 + activity, "time": t.UnixMilli(), "severity_id": severity, "metadata": meta,
		"device":   map[string]any{"hostname": c.o.Hostname, "type_id": 0},
		"unmapped": map[string]any{"sbx_profile": c.r.Profile, "sbx_command": c.r.Command, "sbx_verdict": c.r.Verdict},
	}
}

func process(pid int, exe string, argv []string) map[string]any {
	return map[string]any{"pid": pid, "cmd_line": strings.Join(argv, " "),
		"file": map[string]any{"path": exe, "name": path.Base(exe), "type_id": 1}}
}

// severities (OCSF severity_id)
const (
	sevInformational = 1
	sevMedium        = 3
	sevHigh          = 4
)

func (c converter) processes() []Event {
	var out []Event
	for _, e := range c.r.Processes.Execs {
		ev := c.base(ClassProcess, categorySystem, 1, "Launch", e.Time, sevInformational)
		ev["process"] = process(e.Pid, e.Exe, e.Argv)
		ev["actor"] = map[string]any{"process": map[string]any{"pid": e.PPid}}
		out = append(out, ev)
	}
	for _, p := range c.r.Processes.LeftRunning {
		ev := c.base(ClassProcess, categorySystem, 1, "Launch", p.Started, sevMedium)
		ev["process"] = process(p.Pid, p.Exe, p.Argv)
		ev["actor"] = map[string]any{"process": map[string]any{"pid": p.PPid}}
		ev["message"] = "left running after the command exited"
		out = append(out, ev)
	}
	return out
}

func (c converter) network() []Event {
	var out []Event
	for _, d := range c.r.Network.Denied {
		ev := c.base(ClassNetwork, categoryNetwork, 5, "Refuse", time.Time{}, sevMedium)
		ev["dst_endpoint"] = map[string]any{"ip": d.Address, "port": d.Port}
		ev["src_endpoint"] = map[string]any{"hostname": "sbx"}
		ev["connection_info"] = map[string]any{"protocol_name": d.Proto, "direction_id": 2, "direction": "Outbound"}
		if d.Direction == report.DirectionIn { // someone on the uplink side tried to reach the sandbox
			ev["src_endpoint"] = map[string]any{"ip": d.Address}
			ev["dst_endpoint"] = map[string]any{"hostname": "sbx", "port": d.Port}
			ev["connection_info"] = map[string]any{"protocol_name": d.Proto, "direction_id": 1, "direction": "Inbound"}
		}
		ev["count"] = d.Count
		ev["action_id"], ev["action"] = 2, "Denied"
		ev["disposition_id"], ev["disposition"] = 2, "Blocked"
		out = append(out, ev)
	}
	return out
}

func (c converter) dns() []Event {
	var out []Event
	for _, q := range c.r.Network.DNS {
		ev := c.base(ClassDNS, categoryNetwork, 1, "Query", time.Time{}, sevInformational)
		ev["query"] = map[string]any{"hostname": q.Name, "type": q.Type}
		ev["src_endpoint"] = map[string]any{"hostname": "sbx"}
		if q.Count > 1 {
			ev["count"] = q.Count
		}
		if q.Reason != "" {
			ev["status_detail"] = q.Reason
		}
		if q.Allowed {
			ev["action_id"], ev["action"] = 1, "Allowed"
		} else {
			ev["action_id"], ev["action"] = 2, "Denied"
			ev["rcode_id"], ev["rcode"] = 5, "Refused"
			ev["severity_id"] = sevMedium
		}
		out = append(out, ev)
	}
	return out
}

func (c converter) files() []Event {
	var out []Event
	for _, list := range []struct {
		paths []string
		id    int
		name  string
	}{{c.r.Files.Created, 1, "Create"}, {c.r.Files.Modified, 3, "Update"}, {c.r.Files.Deleted, 4, "Delete"}} {
		for _, p := range list.paths {
			out = append(out, c.fileEvent(p, list.id, list.name))
		}
	}
	for _, f := range c.r.Persistence {
		if f.Change == "refused" {
			ev := c.fileEvent(f.Path, 1, "Create")
			ev["status_id"], ev["status"] = 2, "Failure"
			out = append(out, ev)
		}
	}
	return out
}

// fileEvent is one File System Activity on p, with the persistence mechanism p plants, if any.
func (c converter) fileEvent(p string, activity int, name string) Event {
	ev := c.base(ClassFileSystem, categorySystem, activity, name, time.Time{}, sevInformational)
	ev["file"] = map[string]any{"path": p, "name": path.Base(p), "type_id": 0}
	// Which process wrote a file is not observed (the before/after comparison finds the change, not its
	// writer): the actor is sbx's sandbox, and the command is in unmapped.sbx_command. A process object
	// without a pid or uid would break OCSF's constraint on it.
	ev["actor"] = map[string]any{"app_name": "sbx"}
	for _, f := range c.r.Persistence {
		if f.Path == p {
			ev["unmapped"].(map[string]any)["sbx_persistence"] = f.Mechanism
			ev["severity_id"] = sevMedium
		}
	}
	return ev
}

func (c converter) findings() []Event {
	var out []Event
	for i, v := range c.r.Violations {
		ev := c.base(ClassDetectionFinding, categoryFindings, 1, "Create", time.Time{}, sevHigh)
		uid := fmt.Sprintf("%d", i)
		if c.o.RunID != "" {
			uid = c.o.RunID + "/" + uid
		}
		ev["finding_info"] = map[string]any{"uid": uid, "title": v.Rule, "desc": v.Message, "types": []string{"sbx:" + v.Rule}}
		ev["message"] = v.Message
		ev["status_id"], ev["status"] = 1, "New"
		out = append(out, ev)
	}
	return out
}
