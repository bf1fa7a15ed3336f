package policy

import "testing"

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		bad  bool
	}{
		{in: "64MiB", want: 64 << 20}, {in: "64Mi", want: 64 << 20}, {in: "64M", want: 64 << 20},
		{in: "64mb", want: 64 << 20}, {in: "1GiB", want: 1 << 30}, {in: "1G", want: 1 << 30},
		{in: "1.5GiB", want: 3 << 29}, {in: "4096", want: 4096}, {in: "10KiB", want: 10240}, {in: "0", want: 0},
		{in: "lots", bad: true}, {in: "MiB", bad: true}, {in: "1XB", bad: true}, {in: "99999999999T", bad: true},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, bad %v", tt.in, got, err, tt.want, tt.bad)
		}
		if !tt.bad {
			if back, _ := ParseSize(FormatSize(got)); back != got {
				t.Errorf("FormatSize(%d) = %q does not round trip", got, FormatSize(got))
			}
		}
	}
}
