package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Size is a number of bytes written as people write it. Every unit is a power of 1024:
// K, Ki, KB, KiB = 2^10; M, Mi, MB, MiB = 2^20; G... = 2^30; T... = 2^40 (case-insensitive; "B" or none =
// bytes). In a memory or disk limit "64M" almost always means 64 MiB, so sbx reads it that way.
// A decimal mantissa is allowed ("1.5GiB"); the result is rounded down to whole bytes.
type Size int64

var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "ki": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mi": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gi": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "ti": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}

const sizeHint = "write sizes as 512MiB, 1GiB, 64M (M = MiB) or plain bytes"

// ParseSize parses a size such as "64MiB", "64Mi", "64M", "1.5GiB" or "1048576".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.' || (i == 0 && (t[i] == '-' || t[i] == '+'))) {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	if num == "" || !ok {
		return 0, badValue(sizeHint, "%q is not a size", s)
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || (n != 0 && (n > math.MaxInt64/mult || n < math.MinInt64/mult)) {
			return 0, badValue(sizeHint, "%q is not a size (out of range)", s)
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || math.Abs(f*float64(mult)) >= math.MaxInt64 {
		return 0, badValue(sizeHint, "%q is not a size", s)
	}
	return int64(f * float64(mult)), nil
}

// FormatSize writes n with the largest binary unit that divides it exactly ("1GiB", "1536MiB", "1000").
func FormatSize(n int64) string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return fmt.Sprintf("%d%s", n/u.mult, u.name)
		}
	}
	return strconv.FormatInt(n, 10)
}

func (s *Size) unmarshalNode(n *yaml.Node) error {
	v, err := scalarString(n)
	if err != nil {
		return err
	}
	b, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s = Size(b)
	return nil
}

// MarshalYAML writes the size in its shortest exact form.
func (s Size) MarshalYAML() (any, error) { return FormatSize(int64(s)), nil }

// Duration is a Go duration ("30s", "5m", "1h30m"); "0" and "none" mean no limit.
type Duration time.Duration

const durationHint = "write durations as Go does: 90s, 5m, 1h30m; 0 or none for no timeout"

// ParseDuration parses a Go duration, "0" or "none".
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "none" || t == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, badValue(durationHint, "%q is not a duration", s)
	}
	return d, nil
}

func (d *Duration) unmarshalNode(n *yaml.Node) error {
	v, err := scalarString(n)
	if err != nil {
		return err
	}
	x, err := ParseDuration(v)
	if err != nil {
		return err
	}
	*d = Duration(x)
	return nil
}

// MarshalYAML writes the duration as Go prints it, or "none".
func (d Duration) MarshalYAML() (any, error) {
	if d == 0 {
		return "none", nil
	}
	return time.Duration(d).String(), nil
}
