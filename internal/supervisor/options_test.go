package supervisor

import (
	"slices"
	"testing"
)

// TestSplitOptions: overlay's data splits at commas that its escapes leave alone (sbx escapes ',' ':'
// and '\' in a layer's path: a working directory named "a,b:c\d" is one like any other), and keeps the
// escapes for overlay to undo; other file systems split at every comma, as mount(2) splits them.
func TestSplitOptions(t *testing.T) {
	for _, tc := range []struct {
		name, fsType, data string
		want               []string
	}{
		{"tmpfs", "tmpfs", "size=1m,mode=0755", []string{"size=1m", "mode=0755"}},
		{"overlay plain", "overlay", "lowerdir=/usr:/e,upperdir=/u,workdir=/w,userxattr,volatile",
			[]string{"lowerdir=/usr:/e", "upperdir=/u", "workdir=/w", "userxattr", "volatile"}},
		{"overlay escaped", "overlay", `lowerdir=/w/a\,b\:c\\d e,upperdir=/u/x\,y,workdir=/w`,
			[]string{`lowerdir=/w/a\,b\:c\\d e`, `upperdir=/u/x\,y`, "workdir=/w"}},
		{"overlay escaped backslash before comma", "overlay", `lowerdir=/a\\,userxattr`,
			[]string{`lowerdir=/a\\`, "userxattr"}},
		{"not overlay: no escapes", "tmpfs", `a\,b`, []string{`a\`, "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := splitOptions(tc.fsType, tc.data); !slices.Equal(got, tc.want) {
				t.Errorf("splitOptions(%q, %q) = %q, want %q", tc.fsType, tc.data, got, tc.want)
			}
		})
	}
}
