package netcontract

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/sbx-dev/sbx/policy"
)

// A probe targets file (sbx probe --targets FILE) lists the user's own targets, deny and allow, each
// with a label and one of tcp, udp or dns:
//
//	deny:
//	  - {label: "LAN redis", tcp: "192.168.0.1:6379"}
//	  - {label: "LAN DNS", udp: "10.0.0.53:53"}
//	  - {label: "exfil name", dns: "attacker.example"}
//	allow:
//	  - {label: "PyPI", tcp: "pypi.org:443"}
//
// tcp and udp take host:port, ip:port or cidr:port (a range is probed at its first host address, a name
// is resolved through the sandbox's resolver first); dns takes a name. The targets are probed as they
// are: the contract is not changed by them.

// MaxFileTargets bounds the entries of a targets file (they travel to the probe in its argument list).
const MaxFileTargets = 256

// maxLabel bounds a target's label, which the probe prints.
const maxLabel = 80

type targetsFile struct {
	Deny  []fileTarget `yaml:"deny"`
	Allow []fileTarget `yaml:"allow"`
}

type fileTarget struct {
	Label string `yaml:"label"`
	TCP   string `yaml:"tcp"`
	UDP   string `yaml:"udp"`
	DNS   string `yaml:"dns"`
}

// ErrTargets marks a targets file that cannot be used; the message names the entry.
var ErrTargets = errors.New("probe targets")

// ParseTargets reads a targets file's YAML (unknown keys are errors) into targets.
func ParseTargets(r io.Reader) ([]Target, error) {
	data, err := io.ReadAll(io.LimitReader(r, 1<<20+1))
	if err != nil {
		return nil, err
	}
	if len(data) > 1<<20 {
		return nil, fmt.Errorf("%w: the file is over 1 MiB", ErrTargets)
	}
	var f targetsFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %s", ErrTargets, yamlError(err))
	}
	if n := len(f.Deny) + len(f.Allow); n > MaxFileTargets {
		return nil, fmt.Errorf("%w: %d entries, at most %d", ErrTargets, n, MaxFileTargets)
	}
	var out []Target
	for _, l := range []struct {
		field, kind string
		entries     []fileTarget
	}{{"deny", KindDeny, f.Deny}, {"allow", KindAllow, f.Allow}} {
		for i, e := range l.entries {
			t, err := e.target(l.kind)
			if err != nil {
				return nil, fmt.Errorf("%w: %s[%d]: %v", ErrTargets, l.field, i, err)
			}
			if t.Label == "" {
				t.Label = l.field + " target " + strconv.Itoa(i+1)
			}
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no deny or allow entries", ErrTargets)
	}
	return out, nil
}

// unknownField is how the YAML library names a key the struct lacks.
var unknownField = regexp.MustCompile(`^(line \d+): field (\S+) not found in type \S+$`)

// yamlError is the first of a decoding error's lines, an unknown key said as such.
func yamlError(err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return strings.TrimPrefix(err.Error(), "yaml: ")
	}
	if m := unknownField.FindStringSubmatch(te.Errors[0]); m != nil {
		return m[1] + ": unknown key " + strconv.Quote(m[2]) + " (an entry has label and one of tcp, udp or dns)"
	}
	return te.Errors[0]
}

// target is the entry as a probe target of kind.
func (e fileTarget) target(kind string) (Target, error) {
	if len(e.Label) > maxLabel {
		return Target{}, fmt.Errorf("label over %d bytes", maxLabel)
	}
	for _, r := range e.Label {
		if !unicode.IsPrint(r) {
			return Target{}, fmt.Errorf("label %q holds a character that is not printable", e.Label)
		}
	}
	set := 0
	for _, v := range []string{e.TCP, e.UDP, e.DNS} {
		if v != "" {
			set++
		}
	}
	if set != 1 {
		return Target{}, errors.New("give exactly one of tcp, udp or dns")
	}
	t := Target{Kind: kind, Label: e.Label}
	if e.DNS != "" {
		name, err := policy.ParseName(e.DNS)
		if err != nil {
			return Target{}, fmt.Errorf("dns %q: %v", e.DNS, err)
		}
		if name.IsWildcard() {
			return Target{}, fmt.Errorf("dns %q: a wildcard cannot be probed; name one host", e.DNS)
		}
		t.Proto, t.Addr = "dns", name.String()
		return t, nil
	}
	proto, dest := "tcp", e.TCP
	if e.UDP != "" {
		proto, dest = "udp", e.UDP
	}
	r, err := policy.ParseDest(proto + ":" + dest)
	if err != nil {
		return Target{}, fmt.Errorf("%s %q: %v", proto, dest, err)
	}
	if r.Port == 0 || r.PortEnd != 0 {
		return Target{}, fmt.Errorf("%s %q: name one port (host:port)", proto, dest)
	}
	rt := ruleTargets([]policy.NetRule{r}, kind, "")
	if len(rt) == 0 {
		return Target{}, fmt.Errorf("%s %q: a wildcard name cannot be probed; name one host", proto, dest)
	}
	t.Proto, t.Addr, t.Port = rt[0].Proto, rt[0].Addr, rt[0].Port
	return t, nil
}
