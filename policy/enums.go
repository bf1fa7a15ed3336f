package policy

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// NetworkMode is network.mode.
type NetworkMode string

// LandlockMode is filesystem.landlock.
type LandlockMode string

// ApplyMode is filesystem.apply.
type ApplyMode string

// SyscallBase is syscalls.base.
type SyscallBase string

// ShareMode is filesystem.share[].mode.
type ShareMode string

// Permission is expect.left_running and expect.persistence.
type Permission string

// Reaction is expect.network_denied and expect.dns_refused.
type Reaction string

// LimitsRequirement is limits.require.
type LimitsRequirement string

// Enum values. The empty string of each type means "not set": Compile applies the default.
const (
	ModeNone     NetworkMode = NetNone
	ModeContract NetworkMode = NetContract

	LandlockRequired LandlockMode = "required"
	LandlockDegrade  LandlockMode = "degrade"

	ApplyNever  ApplyMode = "never"
	ApplyOnPass ApplyMode = "on-pass"
	ApplyAlways ApplyMode = "always"

	BaseDockerDefault SyscallBase = "docker-default"
	BaseNone          SyscallBase = "none"

	ShareRO ShareMode = "ro"
	ShareRW ShareMode = "rw"

	PermAllow Permission = "allow"
	PermDeny  Permission = "deny"

	ReactViolation Reaction = "violation"
	ReactIgnore    Reaction = "ignore"

	RequireCgroup LimitsRequirement = "cgroup"
)

// Values lists the accepted values.
func (NetworkMode) Values() []string { return []string{NetNone, NetContract} }

// Values lists the accepted values.
func (LandlockMode) Values() []string { return []string{"required", "degrade"} }

// Values lists the accepted values.
func (ApplyMode) Values() []string { return []string{"never", "on-pass", "always"} }

// Values lists the accepted values.
func (SyscallBase) Values() []string { return []string{"docker-default", "none"} }

// Values lists the accepted values.
func (ShareMode) Values() []string { return []string{"ro", "rw"} }

// Values lists the accepted values.
func (Permission) Values() []string { return []string{"allow", "deny"} }

// Values lists the accepted values.
func (Reaction) Values() []string { return []string{"violation", "ignore"} }

// Values lists the accepted values.
func (LimitsRequirement) Values() []string { return []string{"cgroup"} }

func (m *NetworkMode) unmarshalNode(n *yaml.Node) error {
	return decodeEnum(n, (*string)(m), m.Values())
}
func (m *LandlockMode) unmarshalNode(n *yaml.Node) error {
	return decodeEnum(n, (*string)(m), m.Values())
}
func (m *ApplyMode) unmarshalNode(n *yaml.Node) error { return decodeEnum(n, (*string)(m), m.Values()) }
func (m *SyscallBase) unmarshalNode(n *yaml.Node) error {
	return decodeEnum(n, (*string)(m), m.Values())
}
func (m *ShareMode) unmarshalNode(n *yaml.Node) error { return decodeEnum(n, (*string)(m), m.Values()) }
func (m *Permission) unmarshalNode(n *yaml.Node) error {
	return decodeEnum(n, (*string)(m), m.Values())
}
func (m *Reaction) unmarshalNode(n *yaml.Node) error { return decodeEnum(n, (*string)(m), m.Values()) }
func (m *LimitsRequirement) unmarshalNode(n *yaml.Node) error {
	return decodeEnum(n, (*string)(m), m.Values())
}

func decodeEnum(n *yaml.Node, dst *string, values []string) error {
	s, err := scalarString(n)
	if err != nil {
		return err
	}
	if err := checkEnum(s, values); err != nil {
		return err
	}
	*dst = s
	return nil
}

// checkEnum accepts "" (unset) and the listed values.
func checkEnum(s string, values []string) error {
	if s == "" || slices.Contains(values, s) {
		return nil
	}
	hint := suggest(s, values)
	if hint == "" {
		hint = "use one of: " + strings.Join(values, ", ")
	}
	return badValue(hint, "unknown value %q (want %s)", s, strings.Join(values, " or "))
}

// scalarString accepts any scalar as a string; null is "".
func scalarString(n *yaml.Node) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", badValue("", "expected a single value, found %s", describe(n))
	}
	if n.ShortTag() == "!!null" {
		return "", nil
	}
	return n.Value, nil
}

// describe names what a node is, for "expected X, found Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "nothing (null)"
		case "!!bool":
			return fmt.Sprintf("a boolean (%s)", n.Value)
		case "!!int", "!!float":
			return fmt.Sprintf("a number (%s)", n.Value)
		}
		return fmt.Sprintf("a string (%q)", truncate(n.Value, 40))
	}
	return "an empty document"
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "..."
}
