package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/policy"
)

// TestLocalhost6 checks that the sandbox's localhost is ::1 exactly when the host's is.
func TestLocalhost6(t *testing.T) {
	for _, c := range []struct {
		name  string
		hosts string
		err   error
		want  bool
	}{
		{"debian", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n", nil, true},
		{"v4 only", "127.0.0.1 localhost\n127.0.0.1 vm\n", nil, false},
		{"ip6-localhost only", "127.0.0.1 localhost\n::1 ip6-localhost ip6-loopback\n", nil, false},
		{"commented", "127.0.0.1 localhost\n# ::1 localhost\n::1 ip6-loopback # localhost\n", nil, false},
		{"long form", "0:0:0:0:0:0:0:1 localhost\n", nil, true},
		{"upper case", "127.0.0.1 localhost\n::1 LocalHost\n", nil, true},
		{"unreadable", "", errors.New("no file"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := localhost6([]byte(c.hosts), c.err)
			if got != c.want {
				t.Fatalf("localhost6 = %v, want %v", got, c.want)
			}
			content := hostsContent(got)
			if has := strings.Contains(content, "::1\tlocalhost "); has != c.want {
				t.Fatalf("hosts file maps localhost to ::1: %v, want %v:\n%s", has, c.want, content)
			}
			if !strings.Contains(content, "127.0.0.1\tlocalhost\n") || !strings.Contains(content, "\t"+Hostname+"\n") {
				t.Fatalf("hosts file lacks localhost or the sandbox's name:\n%s", content)
			}
		})
	}
}

// TestReadHostsNoBlock checks that a hosts file that is not a regular file neither blocks the run's
// setup (a FIFO with no writer: open without O_NONBLOCK waits for one forever) nor is read.
func TestReadHostsNoBlock(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "hosts")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := readHosts(fifo)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("readHosts read a FIFO")
		}
	case <-time.After(10 * time.Second):
		// Unblock the reader so that the test ends: open the FIFO for writing and close it.
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		t.Fatal("readHosts blocked on a FIFO")
	}
	if !localhost6(readHosts(fifo)) {
		t.Fatal("a hosts file that cannot be read must give the usual answer (localhost is ::1)")
	}
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := readHosts(regular); err != nil || string(data) != "127.0.0.1 localhost\n" {
		t.Fatalf("readHosts(regular) = %q, %v", data, err)
	}
}

// TestShmOptions checks that /dev/shm holds as much as the memory limit, or the kernel's default.
func TestShmOptions(t *testing.T) {
	base := []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}
	for _, c := range []struct {
		name   string
		memory int64
		want   string
	}{
		{"limit", 1 << 30, "nosuid,noexec,nodev,mode=1777,size=1073741824"},
		{"no limit", 0, "nosuid,noexec,nodev,mode=1777"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := strings.Join(shmOptions(base, c.memory), ","); got != c.want {
				t.Fatalf("shmOptions = %s, want %s", got, c.want)
			}
			if base[4] != "size=65536k" {
				t.Fatal("shmOptions changed its input")
			}
		})
	}
}

// TestOwnFileMounts: sbx's /etc/hosts and /etc/resolv.conf go over a shared /etc only onto a regular
// file the share holds. A link there (planted by a command in an earlier run of a writable share) would
// have libcontainer put sbx's mount where the link points in the sandbox and make the missing path on
// the host through another share; a share without the file would fail the run (make the mount point in
// a read-only share).
func TestOwnFileMounts(t *testing.T) {
	etc := t.TempDir()
	write := func(name string) {
		if err := os.WriteFile(filepath.Join(etc, name), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(name, target string) {
		if err := os.Symlink(target, filepath.Join(etc, name)); err != nil {
			t.Fatal(err)
		}
	}
	run := t.TempDir()
	userIDs := IDMap{RootUID: 100000, RootGID: 100000, UID: 1000, GID: 1000, HostUID: 1000, HostGID: 1000}
	for _, c := range []struct {
		name   string
		make   func()
		shares []policy.Share
		want   []string // sbx's own mounts among /etc/hosts and /etc/resolv.conf
		ids    IDMap
	}{
		{"no share", func() {}, nil, []string{"/etc/resolv.conf", "/etc/hosts"}, IDMap{}},
		{"share elsewhere", func() {}, []policy.Share{{Host: etc, Sandbox: "/srv/etc"}}, []string{"/etc/resolv.conf", "/etc/hosts"}, IDMap{}},
		{"regular files", func() { write("hosts"); write("resolv.conf") },
			[]policy.Share{{Host: etc, Sandbox: "/etc"}}, []string{"/etc/resolv.conf", "/etc/hosts"}, IDMap{}},
		{"file shared itself", func() { write("hosts") },
			[]policy.Share{{Host: filepath.Join(etc, "hosts"), Sandbox: "/etc/hosts"}}, []string{"/etc/resolv.conf"}, IDMap{}},
		{"missing", func() {}, []policy.Share{{Host: etc, Sandbox: "/etc/"}}, nil, IDMap{}},
		{"links", func() {
			link("hosts", "/tmp/elsewhere/planted")
			link("resolv.conf", "../run/systemd/resolve/stub-resolv.conf")
		},
			[]policy.Share{{Host: etc, Sandbox: "/etc", Writable: true}}, nil, IDMap{}},
		{"link to a regular file", func() { write("real"); write("resolv.conf"); link("hosts", "real") },
			[]policy.Share{{Host: etc, Sandbox: "/etc"}}, []string{"/etc/resolv.conf"}, IDMap{}},
		{"directory", func() { write("resolv.conf"); os.Mkdir(filepath.Join(etc, "hosts"), 0o755) },
			[]policy.Share{{Host: etc, Sandbox: "/etc"}}, []string{"/etc/resolv.conf"}, IDMap{}},
		// the sandbox's root, which makes the mount points, may not search a root-owned 0700 directory
		{"closed to the sandbox's root", func() { write("hosts"); write("resolv.conf"); os.Chmod(etc, 0o700) },
			[]policy.Share{{Host: etc, Sandbox: "/etc"}}, nil, userIDs},
		{"open to the sandbox's root", func() { write("hosts"); write("resolv.conf") },
			[]policy.Share{{Host: etc, Sandbox: "/etc"}}, []string{"/etc/resolv.conf", "/etc/hosts"}, userIDs},
		// a directory that someone but the host's root may change: the file looked at could be a link
		// by the time libcontainer mounts (another sandbox with a writable share of it swaps them)
		{"writable by others", func() { write("hosts"); write("resolv.conf"); os.Chmod(etc, 0o777) },
			[]policy.Share{{Host: etc, Sandbox: "/etc"}}, nil, userIDs},
		{"the sandbox's root's", func() { write("hosts"); write("resolv.conf"); os.Chown(etc, 100000, 100000) },
			[]policy.Share{{Host: etc, Sandbox: "/etc", Writable: true}}, nil, userIDs},
		{"a user's", func() { write("hosts"); write("resolv.conf"); os.Chown(etc, 1000, 1000) },
			[]policy.Share{{Host: etc, Sandbox: "/etc"}}, nil, IDMap{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			entries, _ := os.ReadDir(etc)
			for _, e := range entries {
				os.RemoveAll(filepath.Join(etc, e.Name()))
			}
			if err := errors.Join(os.Chmod(etc, 0o755), os.Chown(etc, 0, 0)); err != nil {
				t.Fatal(err)
			}
			c.make()
			plan := &policy.Plan{Filesystem: policy.Filesystem{Shares: c.shares}}
			s := Spec(SpecInput{Plan: plan, ID: "x", Rootfs: "/", IDs: c.ids,
				ResolvConf: filepath.Join(run, "resolv.conf"), Hosts: filepath.Join(run, "hosts")})
			var got []string
			for _, m := range s.Mounts {
				if strings.HasPrefix(m.Source, run+"/") {
					got = append(got, m.Destination)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("sbx's own mounts %q, want %q", got, c.want)
			}
		})
	}
}

// TestPlainFile: sbx's /etc/resolv.conf and /etc/hosts go onto a regular file of the overlay. A link
// there (systemd-resolved's relative /etc/resolv.conf) is replaced in the overlay, not followed (the
// mount would land in the sandbox's hidden /run and fail every run), a missing file is made, and a link
// on the way (etc itself) is refused.
func TestPlainFile(t *testing.T) {
	merged := t.TempDir()
	for _, d := range []string{"etc", "run", "linked"} {
		if err := os.Mkdir(filepath.Join(merged, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../run/systemd/resolve/stub-resolv.conf", filepath.Join(merged, "etc", "resolv.conf")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(merged, "linked", "etc")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/etc/resolv.conf", "/etc/hosts"} {
		if err := plainFile(merged, p); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		st, err := os.Lstat(filepath.Join(merged, p))
		if err != nil || !st.Mode().IsRegular() {
			t.Errorf("%s is %v (%v), want a regular file", p, st, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(merged, "run", "systemd")); !os.IsNotExist(err) {
		t.Errorf("the link's target was made (%v), want it left alone", err)
	}
	if err := plainFile(merged, "/linked/etc/hosts"); err == nil {
		t.Error("a file below a link was made, want it refused")
	}
}

// TestResolveRootLinks: links of root's are followed, relative and absolute, chained and with ".."; a
// link anyone else owns, a missing component and a loop are not.
func TestResolveRootLinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("makes links of root's and of another user")
	}
	dir := t.TempDir()
	for _, d := range []string{"real/sub", "other"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"rel": "real", "abs": dir + "/real", "chain": "rel", "up": "real/sub/../sub", "loop": "loop",
		"theirs": "real", "via": "theirs",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Lchown(filepath.Join(dir, "theirs"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		dir + "/real/sub": dir + "/real/sub", dir + "/rel/sub": dir + "/real/sub", dir + "/abs": dir + "/real",
		dir + "/chain/sub": dir + "/real/sub", dir + "/up": dir + "/real/sub",
		dir + "/theirs": "", dir + "/via/sub": "", dir + "/loop": "", dir + "/missing/x": "",
	} {
		got, err := resolveRootLinks(path)
		if (err == nil) != (want != "") || got != want {
			t.Errorf("resolveRootLinks(%s) = %q, %v; want %q", path, got, err, want)
		}
	}
}

// TestCheckShares: what the fallback start's sandbox has at a share's place must be the source sbx
// identified before the start, opened without following a link; a source swapped for a link meanwhile
// (as libcontainer's init would then bind where it leads) fails with ErrShareLink. The test's own root
// stands in for the sandbox's.
func TestCheckShares(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"share", "secret"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	share := filepath.Join(dir, "share")
	s := &Sandbox{cfg: Config{Plan: &policy.Plan{}}}
	s.cfg.Plan.Filesystem.Shares = []policy.Share{{Host: share, Sandbox: share}}
	want, err := s.shareSources()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.checkShares(os.Getpid(), want); err != nil {
		t.Fatalf("checkShares before the swap: %v", err)
	}
	if err := os.Rename(share, share+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "secret"), share); err != nil {
		t.Fatal(err)
	}
	if err := s.checkShares(os.Getpid(), want); !errors.Is(err, ErrShareLink) {
		t.Errorf("checkShares after the swap = %v, want ErrShareLink", err)
	}
	if _, err := s.shareSources(); !errors.Is(err, ErrShareLink) {
		t.Errorf("shareSources of a link = %v, want ErrShareLink", err)
	}
}

// TestPasswdContent checks the sandbox's user database: the command's entry gets HOME as its home,
// the first entry of the uid only, every other line (comments, NIS lines, other users) byte for byte.
func TestPasswdContent(t *testing.T) {
	const host = "root:x:0:0:root:/root:/bin/bash\n# a comment\n+::::::\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nalias:x:65534:65534::/other:/bin/sh\n"
	for _, c := range []struct {
		name        string
		uid         int
		home        string
		want        string
		wantChanged bool
	}{
		{"nobody", 65534, "/tmp", "root:x:0:0:root:/root:/bin/bash\n# a comment\n+::::::\nnobody:x:65534:65534:nobody:/tmp:/usr/sbin/nologin\nalias:x:65534:65534::/other:/bin/sh\n", true},
		{"root", 0, "/tmp", "root:x:0:0:root:/tmp:/bin/bash\n# a comment\n+::::::\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nalias:x:65534:65534::/other:/bin/sh\n", true},
		{"home already", 0, "/root", host, false},
		{"no entry", 1234, "/tmp", host, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, changed := passwdContent([]byte(host), c.uid, c.home)
			if string(got) != c.want || changed != c.wantChanged {
				t.Errorf("passwdContent(%d, %s) = %q, %v; want %q, %v", c.uid, c.home, got, changed, c.want, c.wantChanged)
			}
		})
	}
	// A last line without its newline keeps it so.
	if got, _ := passwdContent([]byte("nobody:x:65534:65534::/nonexistent:/bin/sh"), 65534, "/tmp"); string(got) != "nobody:x:65534:65534::/tmp:/bin/sh" {
		t.Errorf("last line without newline: %q", got)
	}
}
