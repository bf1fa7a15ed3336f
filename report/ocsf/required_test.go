package ocsf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/report"
)

// The rules below are typed by hand after the OCSF 1.3.0 schema's documentation (schema.ocsf.io/1.3.0),
// for the classes sbx writes and the objects inside them: the attributes whose requirement is
// "required", the "at least one of" constraints (none of these has a "just one of") and which attribute
// holds which object. Inherited attributes are written out (the base event's, the System category's
// actor and device, the endpoint base object's identifiers). Profiles are left out: sbx applies none.
// Recommended and optional attributes are not checked. Nothing here is generated from the schema's files.
const rulesVersion = "1.3.0"

// rules are one class's or one object's requirements.
type rules struct {
	required   []string          // attributes that must be present
	atLeastOne []string          // at least one of these must be present
	objects    map[string]string // attribute -> name of the object it holds, checked in turn
}

// baseRequired is what every OCSF 1.3.0 event class requires (the base event).
var baseRequired = []string{"activity_id", "category_uid", "class_uid", "metadata", "severity_id", "time", "type_uid"}

func required(more ...string) []string { return append(slices.Clone(baseRequired), more...) }

// classRules: per class_uid.
var classRules = map[int]rules{
	ClassFileSystem: { // File System Activity (System Activity category: actor and device required)
		required: required("actor", "device", "file"),
		objects:  map[string]string{"actor": "actor", "device": "device", "file": "file", "file_result": "file", "metadata": "metadata"},
	},
	ClassProcess: { // Process Activity
		required: required("actor", "device", "process"),
		objects:  map[string]string{"actor": "actor", "device": "device", "process": "process", "metadata": "metadata"},
	},
	ClassDetectionFinding: { // Detection Finding (Finding base: finding_info required)
		required: required("finding_info"),
		objects:  map[string]string{"finding_info": "finding_info", "device": "device", "metadata": "metadata"},
	},
	ClassNetwork: { // Network Activity: the destination endpoint is required, the source is not
		required: required("dst_endpoint"),
		objects: map[string]string{"dst_endpoint": "network_endpoint", "src_endpoint": "network_endpoint",
			"connection_info": "network_connection_info", "metadata": "metadata"},
	},
	ClassDNS: { // DNS Activity: nothing beyond the base event; query is recommended
		required: required(),
		objects: map[string]string{"query": "dns_query", "dst_endpoint": "network_endpoint", "src_endpoint": "network_endpoint",
			"connection_info": "network_connection_info", "metadata": "metadata"},
	},
}

// endpointIDs are the endpoint base object's identifying attributes, at least one of which an endpoint
// (device, network_endpoint) must have.
var endpointIDs = []string{"ip", "uid", "name", "hostname", "instance_uid", "interface_uid", "interface_name"}

// objectRules: per object name.
var objectRules = map[string]rules{
	"metadata":                {required: []string{"product", "version"}, objects: map[string]string{"product": "product"}},
	"product":                 {required: []string{"vendor_name"}, atLeastOne: []string{"name", "uid"}},
	"device":                  {required: []string{"type_id"}, atLeastOne: endpointIDs},
	"network_endpoint":        {atLeastOne: append(slices.Clone(endpointIDs), "svc_name")},
	"network_connection_info": {required: []string{"direction_id"}},
	"actor": {atLeastOne: []string{"process", "user", "invoked_by", "session", "app_name", "app_uid"},
		objects: map[string]string{"process": "process"}},
	"process":      {atLeastOne: []string{"pid", "uid"}, objects: map[string]string{"file": "file", "parent_process": "process"}},
	"file":         {required: []string{"name", "type_id"}, objects: map[string]string{"product": "product"}},
	"dns_query":    {required: []string{"hostname"}},
	"finding_info": {required: []string{"title", "uid"}},
}

// check returns the breaches of r in the object v at path, and of the objects inside it.
func check(path string, r rules, v map[string]any) []string {
	var bad []string
	for _, k := range r.required {
		if _, ok := v[k]; !ok {
			bad = append(bad, fmt.Sprintf("%s.%s is required", path, k))
		}
	}
	if len(r.atLeastOne) > 0 && !slices.ContainsFunc(r.atLeastOne, func(k string) bool { _, ok := v[k]; return ok }) {
		bad = append(bad, fmt.Sprintf("%s: at least one of %v is required, found none", path, r.atLeastOne))
	}
	for k, obj := range r.objects {
		child, ok := v[k].(map[string]any)
		if !ok {
			continue
		}
		or, known := objectRules[obj]
		if !known {
			bad = append(bad, fmt.Sprintf("%s.%s: no rules for object %s", path, k, obj))
			continue
		}
		bad = append(bad, check(path+"."+k, or, child)...)
	}
	return bad
}

// fullReport has one of everything the converter turns into an event.
func fullReport() *report.Report {
	r := report.New("contract", []string{"sh", "-c", "x"})
	r.Verdict = report.VerdictViolation
	r.Processes.Execs = []report.Exec{{Pid: 2, PPid: 1, Exe: "/usr/bin/curl", Argv: []string{"curl", "http://169.254.169.254/"}}}
	r.Processes.LeftRunning = []report.Process{{Pid: 3, PPid: 1, Exe: "/usr/bin/sleep", Argv: []string{"sleep", "300"}}}
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
	if rulesVersion != Version {
		t.Fatalf("the rules are of OCSF %s, the events claim %s", rulesVersion, Version)
	}
	for _, rs := range append(slices.Collect(maps.Values(classRules)), slices.Collect(maps.Values(objectRules))...) {
		for attr, obj := range rs.objects {
			if _, ok := objectRules[obj]; !ok {
				t.Errorf("%s holds object %s, which has no rules", attr, obj)
			}
		}
	}
	var buf bytes.Buffer
	if err := WriteLines(&buf, Convert(fullReport(), Options{Time: time.Unix(1700000000, 0), Hostname: "h", Version: "t", RunID: "run-1"})); err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var ev map[string]any
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatal(err)
		}
		class, _ := ev["class_uid"].(float64)
		r, ok := classRules[int(class)]
		if !ok {
			t.Errorf("class %v has no rules: add them to classRules", ev["class_uid"])
			continue
		}
		seen[int(class)] = true
		for _, b := range check(fmt.Sprintf("class %d", int(class)), r, ev) {
			t.Error(b)
		}
	}
	for class := range classRules {
		if !seen[class] {
			t.Errorf("no event of class %d was checked", class)
		}
	}
}

// TestRequiredFieldsBite: the check finds, in an event of each class, a missing required attribute, a
// missing nested one and a broken constraint, each as exactly one breach, so that passing means something.
func TestRequiredFieldsBite(t *testing.T) {
	events := Convert(fullReport(), Options{Hostname: "h", Version: "t"})
	obj := func(e map[string]any, path ...string) map[string]any {
		for _, k := range path {
			e = e[k].(map[string]any)
		}
		return e
	}
	for _, tt := range []struct {
		name   string
		class  int
		mutate func(map[string]any)
	}{
		{"time", ClassNetwork, func(e map[string]any) { delete(e, "time") }},
		{"type_uid", ClassDNS, func(e map[string]any) { delete(e, "type_uid") }},
		{"direction_id", ClassNetwork, func(e map[string]any) { delete(obj(e, "connection_info"), "direction_id") }},
		{"endpoint identity", ClassNetwork, func(e map[string]any) { e["dst_endpoint"] = map[string]any{"port": 80} }},
		{"dst_endpoint", ClassNetwork, func(e map[string]any) { delete(e, "dst_endpoint") }},
		{"metadata.version", ClassDNS, func(e map[string]any) { delete(obj(e, "metadata"), "version") }},
		{"product.vendor_name", ClassFileSystem, func(e map[string]any) { delete(obj(e, "metadata", "product"), "vendor_name") }},
		{"product name or uid", ClassProcess, func(e map[string]any) { delete(obj(e, "metadata", "product"), "name") }},
		{"dns query hostname", ClassDNS, func(e map[string]any) { delete(obj(e, "query"), "hostname") }},
		{"process file type_id", ClassProcess, func(e map[string]any) { delete(obj(e, "process", "file"), "type_id") }},
		{"actor process pid", ClassProcess, func(e map[string]any) { delete(obj(e, "actor", "process"), "pid") }},
		{"actor", ClassFileSystem, func(e map[string]any) { e["actor"] = map[string]any{} }},
		{"device type_id", ClassFileSystem, func(e map[string]any) { delete(obj(e, "device"), "type_id") }},
		{"device identity", ClassProcess, func(e map[string]any) { delete(obj(e, "device"), "hostname") }},
		{"file name", ClassFileSystem, func(e map[string]any) { delete(obj(e, "file"), "name") }},
		{"finding_info.uid", ClassDetectionFinding, func(e map[string]any) { delete(obj(e, "finding_info"), "uid") }},
	} {
		i := slices.IndexFunc(events, func(e Event) bool { return e["class_uid"] == tt.class })
		if i < 0 {
			t.Fatalf("%s: no event of class %d", tt.name, tt.class)
		}
		b, err := json.Marshal(events[i])
		if err != nil {
			t.Fatal(err)
		}
		var ev map[string]any
		if err := json.Unmarshal(b, &ev); err != nil {
			t.Fatal(err)
		}
		if bad := check("event", classRules[tt.class], ev); len(bad) != 0 {
			t.Fatalf("%s: the unchanged event breaks the rules: %v", tt.name, bad)
		}
		tt.mutate(ev)
		if bad := check("event", classRules[tt.class], ev); len(bad) != 1 {
			t.Errorf("%s: %d breaches found (%v), want 1", tt.name, len(bad), bad)
		} else {
			t.Logf("%s: %s", tt.name, bad[0])
		}
	}
}
