package rootfs

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/testutil"
)

// TestPlantDecoys: a decoy per place below each home, none inside a kept path (the working directory),
// none over anything there already; a whiteout on the way (a hidden host directory of that name)
// becomes an opaque directory; a decoy read, changed or removed is told from one left alone.
func TestPlantDecoys(t *testing.T) {
	testutil.RequireRoot(t, "whiteouts and trusted xattrs")
	upper := t.TempDir()
	home := "/tmp/h"
	for _, d := range []string{upper + "/tmp/h/proj", upper + "/tmp/h/.config"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mknod(upper+"/tmp/h/.ssh", unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(upper+"/tmp/h/.netrc", []byte("sbx's own\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	decoys, err := plantDecoys(upper, upper, []string{home}, []string{"/tmp/h/proj", "/tmp/h/.kube"}, 12345, 12345)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]Decoy{}
	for _, d := range decoys {
		byPath[d.Path] = d
	}
	if _, ok := byPath["/tmp/h/.ssh/id_ed25519"]; !ok {
		t.Errorf("no decoy below the whited-out .ssh: %v", decoys)
	}
	if !overlayOpaque(upper + "/tmp/h/.ssh") {
		t.Errorf(".ssh is not opaque: the host's would show through")
	}
	if _, ok := byPath["/tmp/h/.kube/config"]; ok {
		t.Errorf("a decoy inside a kept path")
	}
	if b, _ := os.ReadFile(upper + "/tmp/h/.netrc"); string(b) != "sbx's own\n" {
		t.Errorf(".netrc overwritten: %q", b)
	}
	var st unix.Stat_t
	if unix.Lstat(upper+"/tmp/h/.aws", &st) != nil || st.Uid != 12345 {
		t.Errorf(".aws is not the command's (uid %d): its tools could not write there", st.Uid)
	}
	if len(decoys) < 15 {
		t.Errorf("%d decoys", len(decoys))
	}
	read, changed, removed := byPath["/tmp/h/.aws/credentials"], byPath["/tmp/h/.git-credentials"], byPath["/tmp/h/.env"]
	if _, err := os.ReadFile(read.host); err != nil {
		t.Fatal(err)
	}
	os.Chmod(changed.host, 0o600)
	os.Remove(removed.host)
	for d, want := range map[Decoy]string{read: "read", changed: "changed", removed: "deleted", byPath["/tmp/h/.ssh/id_rsa"]: ""} {
		if got := d.Access(); got != want {
			t.Errorf("%s: access %q, want %q", d.Path, got, want)
		}
	}
}

func overlayOpaque(dir string) bool {
	v := make([]byte, 2)
	n, err := unix.Getxattr(dir, opaqueXattr(), v)
	return err == nil && n == 1 && v[0] == 'y'
}

// BenchmarkPlantDecoys is what the decoys cost a cold run: one home's set written into a layer.
func BenchmarkPlantDecoys(b *testing.B) {
	dir := b.TempDir()
	for i := 0; b.Loop(); i++ {
		upper := filepath.Join(dir, strconv.Itoa(i))
		if err := os.MkdirAll(upper+"/tmp", 0o1777); err != nil {
			b.Fatal(err)
		}
		if _, err := plantDecoys(upper, upper, []string{"/tmp"}, nil, 0, 0); err != nil {
			b.Fatal(err)
		}
	}
}
