package cgroup

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeCgroups is a cgroup v2 tree in a temp dir, with the kernel's answers to the writes the
// delegation's preparation makes: a pid written to a cgroup.procs leaves the cgroup it was in, and
// controllers are refused to a cgroup that holds a process (EBUSY).
type fakeCgroups struct {
	t     *testing.T
	root  string
	units string // the user manager's transient unit files
	// unitDirs are the user manager's unit directories, highest first: /etc/systemd/user-like ones.
	unitDirs []string
	xattrs   map[string]string // "PATH NAME" (PATH below root) -> value
	owners   map[string]uint32 // path (below root) -> owner; others are the caller's
	gone     map[string]bool   // pids that exited: moving them is ESRCH
	writes   []string          // "PATH DATA", PATH below root
	// onEnable runs before a write to a cgroup.subtree_control is answered; an error it returns is the
	// write's (a process that appeared meanwhile).
	onEnable func(f *fakeCgroups, dir string) error
}

const fakeUID = 1000

func newFakeCgroups(t *testing.T) *fakeCgroups {
	f := &fakeCgroups{t: t, root: t.TempDir(), units: t.TempDir(), unitDirs: []string{t.TempDir(), t.TempDir()},
		xattrs: map[string]string{}, owners: map[string]uint32{}, gone: map[string]bool{}}
	f.unit(filepath.Base(scope), "[Scope]\nDelegate=yes\n")
	return f
}

// unit writes the transient unit file of unit name.
func (f *fakeCgroups) unit(name, content string) {
	data := "# This is a transient unit file, created programmatically via the systemd API. Do not edit.\n[Unit]\nDescription=/bin/sh -c 'Delegate=yes'\n\n" + content
	if err := os.WriteFile(filepath.Join(f.units, name), []byte(data), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// userUnit writes rel (a unit file or NAME.d/X.conf) with content into the user manager's unit
// directory dir (an index of unitDirs).
func (f *fakeCgroups) userUnit(dir int, rel, content string) {
	path := filepath.Join(f.unitDirs[dir], rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// cgroup makes the cgroup rel with the given cgroup.controllers, cgroup.subtree_control and processes.
func (f *fakeCgroups) cgroup(rel, controllers, enabled string, pids ...string) {
	dir := filepath.Join(f.root, rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	f.file(rel, "cgroup.controllers", controllers)
	f.file(rel, "cgroup.subtree_control", enabled)
	f.file(rel, "cgroup.procs", strings.Join(pids, "\n"))
}

func (f *fakeCgroups) file(rel, name, content string) {
	if content != "" {
		content += "\n"
	}
	if err := os.WriteFile(filepath.Join(f.root, rel, name), []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeCgroups) read(rel, name string) string {
	b, err := os.ReadFile(filepath.Join(f.root, rel, name))
	if err != nil {
		f.t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

// fs is the cgroupFS of the fake tree for a caller in cgroup self (a /proc/self/cgroup path).
func (f *fakeCgroups) fs(magic int64, self string) cgroupFS {
	return cgroupFS{root: f.root, uid: fakeUID,
		fsType: func(path string) int64 {
			if path != f.root {
				return unix.CGROUP2_SUPER_MAGIC // a hybrid's unified tree
			}
			return magic
		},
		self: func() ([]byte, error) { return []byte("0::" + self + "\n"), nil },
		stat: func(path string, st *unix.Stat_t) error {
			if err := unix.Stat(path, st); err != nil {
				return err
			}
			st.Uid = fakeUID
			if uid, ok := f.owners[f.rel(path)]; ok {
				st.Uid = uid
			}
			return nil
		},
		getxattr: func(path, name string) (string, error) {
			if v, ok := f.xattrs[f.rel(path)+" "+name]; ok {
				return v, nil
			}
			return "", unix.ENODATA
		},
		transient: f.units,
		unitDirs:  f.unitDirs,
		mkdir: func(path string) error {
			if err := os.Mkdir(path, 0o755); err != nil {
				return err
			}
			rel := f.rel(path)
			f.file(rel, "cgroup.controllers", "")
			f.file(rel, "cgroup.subtree_control", "")
			f.file(rel, "cgroup.procs", "")
			return nil
		},
		write: f.write,
	}
}

func (f *fakeCgroups) rel(path string) string {
	rel, err := filepath.Rel(f.root, path)
	if err != nil {
		f.t.Fatal(err)
	}
	return rel
}

// write answers a write as the kernel would.
func (f *fakeCgroups) write(path string, data []byte) error {
	rel := f.rel(path)
	f.writes = append(f.writes, rel+" "+string(data))
	dir := filepath.Dir(rel)
	switch filepath.Base(rel) {
	case "cgroup.procs":
		// Out of every other cgroup of the tree (an exited process is in none), into this one.
		pid := string(data)
		filepath.WalkDir(f.root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Name() == "cgroup.procs" {
				r := f.rel(filepath.Dir(p))
				f.file(r, "cgroup.procs", strings.Join(slices.DeleteFunc(strings.Fields(f.read(r, "cgroup.procs")), func(p string) bool { return p == pid }), "\n"))
			}
			return nil
		})
		if f.gone[pid] {
			return &os.PathError{Op: "write", Path: path, Err: unix.ESRCH}
		}
		f.file(dir, "cgroup.procs", strings.Join(append(strings.Fields(f.read(dir, "cgroup.procs")), pid), "\n"))
	case "cgroup.subtree_control":
		if f.onEnable != nil {
			if err := f.onEnable(f, dir); err != nil {
				return &os.PathError{Op: "write", Path: path, Err: err}
			}
		}
		if f.read(dir, "cgroup.procs") != "" {
			return &os.PathError{Op: "write", Path: path, Err: unix.EBUSY}
		}
		on := strings.Fields(f.read(dir, "cgroup.subtree_control"))
		for _, c := range strings.Fields(string(data)) {
			if !slices.Contains(strings.Fields(f.read(dir, "cgroup.controllers")), strings.TrimPrefix(c, "+")) {
				return &os.PathError{Op: "write", Path: path, Err: unix.ENOENT}
			}
			on = append(on, strings.TrimPrefix(c, "+"))
		}
		f.file(dir, "cgroup.subtree_control", strings.Join(on, " "))
	default:
		return &os.PathError{Op: "write", Path: path, Err: unix.EACCES}
	}
	return nil
}

const scope = "user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope"

// TestDelegationDetect: which cgroup a caller without root gets its runs' cgroups below, on fake trees
// (the host's own is cgroup v1 here).
func TestDelegationDetect(t *testing.T) {
	for _, tc := range []struct {
		name  string
		magic int64
		self  string
		setup func(f *fakeCgroups)
		// want: the delegated cgroup (below the fake root) and its controllers and whether they are
		// enabled already; or wantWhy, a part of the reason there is none.
		want, wantControllers string
		wantEnabled           bool
		wantWhy               string
	}{
		{name: "delegated with controllers", magic: unix.CGROUP2_SUPER_MAGIC, self: "/" + scope,
			setup: func(f *fakeCgroups) { f.cgroup(scope, "cpu memory pids", "", "4242") },
			want:  scope, wantControllers: "memory pids cpu"},
		{name: "owned by root", magic: unix.CGROUP2_SUPER_MAGIC, self: "/user.slice/user-1000.slice/session-2.scope",
			setup: func(f *fakeCgroups) {
				f.cgroup("user.slice/user-1000.slice/session-2.scope", "memory pids", "", "4242")
				f.owners["user.slice/user-1000.slice/session-2.scope"] = 0
			},
			wantWhy: "not delegated: " + "ROOT/user.slice/user-1000.slice/session-2.scope is owned by root"},
		{name: "procs not the caller's", magic: unix.CGROUP2_SUPER_MAGIC, self: "/" + scope,
			setup: func(f *fakeCgroups) {
				f.cgroup(scope, "memory pids", "", "4242")
				f.owners[scope+"/cgroup.procs"] = 0
			},
			wantWhy: "cgroup.procs is owned by root"},
		{name: "controllers missing", magic: unix.CGROUP2_SUPER_MAGIC, self: "/" + scope,
			setup: func(f *fakeCgroups) { f.cgroup(scope, "io", "", "4242") },
			want:  scope, wantControllers: "", wantEnabled: true},
		{name: "cpu missing", magic: unix.CGROUP2_SUPER_MAGIC, self: "/" + scope,
			setup: func(f *fakeCgroups) { f.cgroup(scope, "memory pids", "", "4242") },
			want:  scope, wantControllers: "memory pids"},
		{name: "subtree_control already enabled", magic: unix.CGROUP2_SUPER_MAGIC, self: "/" + scope + "/leaf",
			setup: func(f *fakeCgroups) {
				f.cgroup(scope, "memory pids", "memory pids")
				f.cgroup(scope+"/leaf", "memory pids", "", "4242")
			},
			want: scope, wantControllers: "memory pids", wantEnabled: true},
		{name: "a leaf whose parent is not the caller's", magic: unix.CGROUP2_SUPER_MAGIC, self: "/" + scope + "/leaf",
			setup: func(f *fakeCgroups) {
				f.cgroup(scope, "memory pids", "memory pids")
				f.cgroup(scope+"/leaf", "memory pids", "", "4242")
				f.owners[scope] = 0
			},
			want: scope + "/leaf", wantControllers: "memory pids"},
		{name: "a scope without Delegate=yes", magic: unix.CGROUP2_SUPER_MAGIC, self: "/" + scope,
			setup: func(f *fakeCgroups) {
				f.cgroup(scope, "memory pids", "", "4242")
				f.unit(filepath.Base(scope), "[Scope]\nOOMPolicy=continue\n")
			},
			wantWhy: "is in the systemd unit run-r1.scope, which is not Delegate=yes: an OOM kill in a run would stop the unit"},
		{name: "a scope made Delegate=no again", magic: unix.CGROUP2_SUPER_MAGIC, self: "/" + scope,
			setup: func(f *fakeCgroups) {
				f.cgroup(scope, "memory pids", "", "4242")
				f.unit(filepath.Base(scope), "[Scope]\nDelegate=yes\nDelegate=no\n")
			},
			wantWhy: "not Delegate=yes"},
		{name: "a scope delegating some controllers", magic: unix.CGROUP2_SUPER_MAGIC, self: "/" + scope,
			setup: func(f *fakeCgroups) {
				f.cgroup(scope, "memory pids", "", "4242")
				f.unit(filepath.Base(scope), "[Scope]\nDelegate=memory pids\n")
			},
			want: scope, wantControllers: "memory pids"},
		{name: "a scope whose unit file is gone", magic: unix.CGROUP2_SUPER_MAGIC, self: "/" + scope,
			setup: func(f *fakeCgroups) {
				f.cgroup(scope, "memory pids", "", "4242")
				os.Remove(filepath.Join(f.units, filepath.Base(scope)))
			},
			wantWhy: "whose Delegate= setting cannot be read"},
		{name: "a service marked delegated", magic: unix.CGROUP2_SUPER_MAGIC, self: "/user.slice/user-1000.slice/user@1000.service/app.slice/agent.service",
			setup: func(f *fakeCgroups) {
				f.cgroup("user.slice/user-1000.slice/user@1000.service/app.slice/agent.service", "memory pids", "", "4242")
				f.xattrs["user.slice/user-1000.slice/user@1000.service/app.slice/agent.service user.delegate"] = "1"
			},
			want: "user.slice/user-1000.slice/user@1000.service/app.slice/agent.service", wantControllers: "memory pids"},
		{name: "a service not marked delegated", magic: unix.CGROUP2_SUPER_MAGIC, self: "/user.slice/user-1000.slice/user@1000.service/app.slice/agent.service",
			setup: func(f *fakeCgroups) {
				f.cgroup("user.slice/user-1000.slice/user@1000.service/app.slice/agent.service", "memory pids", "", "4242")
			},
			wantWhy: "agent.service, which is not Delegate=yes"},
		{name: "a user service whose unit file is Delegate=yes (sbx serve's)", magic: unix.CGROUP2_SUPER_MAGIC, self: "/user.slice/user-1000.slice/user@1000.service/app.slice/sbx.service",
			setup: func(f *fakeCgroups) {
				f.cgroup("user.slice/user-1000.slice/user@1000.service/app.slice/sbx.service", "memory pids", "", "4242")
				f.userUnit(1, "sbx.service", "[Service]\nExecStart=/usr/local/bin/sbx serve\nDelegate=yes\n")
			},
			want: "user.slice/user-1000.slice/user@1000.service/app.slice/sbx.service", wantControllers: "memory pids"},
		{name: "a user service whose higher unit file is not", magic: unix.CGROUP2_SUPER_MAGIC, self: "/user.slice/user-1000.slice/user@1000.service/app.slice/sbx.service",
			setup: func(f *fakeCgroups) {
				f.cgroup("user.slice/user-1000.slice/user@1000.service/app.slice/sbx.service", "memory pids", "", "4242")
				f.userUnit(0, "sbx.service", "[Service]\nExecStart=/usr/local/bin/sbx serve\n")
				f.userUnit(1, "sbx.service", "[Service]\nDelegate=yes\n")
			},
			wantWhy: "sbx.service, which is not Delegate=yes"},
		{name: "a user service made Delegate=no by a drop-in", magic: unix.CGROUP2_SUPER_MAGIC, self: "/user.slice/user-1000.slice/user@1000.service/app.slice/sbx.service",
			setup: func(f *fakeCgroups) {
				f.cgroup("user.slice/user-1000.slice/user@1000.service/app.slice/sbx.service", "memory pids", "", "4242")
				f.userUnit(1, "sbx.service", "[Service]\nDelegate=yes\n")
				f.userUnit(1, "sbx.service.d/10-off.conf", "[Service]\nDelegate=no\n")
			},
			wantWhy: "not Delegate=yes"},
		{name: "a templated user service delegated by a drop-in", magic: unix.CGROUP2_SUPER_MAGIC, self: "/user.slice/user-1000.slice/user@1000.service/app.slice/agent@x.service",
			setup: func(f *fakeCgroups) {
				f.cgroup("user.slice/user-1000.slice/user@1000.service/app.slice/agent@x.service", "memory pids", "", "4242")
				f.userUnit(1, "agent@.service", "[Service]\nExecStart=/bin/agent %i\n")
				f.userUnit(0, "agent@.service.d/delegate.conf", "[Service]\nDelegate=yes\n")
			},
			want: "user.slice/user-1000.slice/user@1000.service/app.slice/agent@x.service", wantControllers: "memory pids"},
		{name: "below no unit (a container's cgroup namespace)", magic: unix.CGROUP2_SUPER_MAGIC, self: "/ci-job",
			setup: func(f *fakeCgroups) { f.cgroup("ci-job", "cpu memory pids", "", "4242") },
			want:  "ci-job", wantControllers: "memory pids cpu"},
		{name: "cgroup v1", magic: unix.TMPFS_MAGIC, self: "/", setup: func(*fakeCgroups) {},
			wantWhy: "cgroup v1 hybrid, whose v2 tree (ROOT/unified) has no controllers"},
		{name: "root cgroup", magic: unix.CGROUP2_SUPER_MAGIC, self: "/", setup: func(*fakeCgroups) {},
			wantWhy: "root cgroup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCgroups(t)
			tc.setup(f)
			d, why := f.fs(tc.magic, tc.self).detect()
			why = strings.ReplaceAll(why, f.root, "ROOT")
			if tc.wantWhy != "" {
				if d != nil || !strings.Contains(why, tc.wantWhy) {
					t.Fatalf("detect = %+v, %q; want none, %q", d, why, tc.wantWhy)
				}
				return
			}
			if d == nil {
				t.Fatalf("detect: none (%s); want %s", why, tc.want)
			}
			if got := f.rel(d.dir); got != tc.want || strings.Join(d.controllers, " ") != tc.wantControllers || d.enabled != tc.wantEnabled {
				t.Errorf("detect = %s (%s) enabled %v; want %s (%s) enabled %v", got, strings.Join(d.controllers, " "), d.enabled, tc.want, tc.wantControllers, tc.wantEnabled)
			}
		})
	}
}

// TestDelegationPrepare: the processes of the delegated cgroup move into its leaf before the
// controllers are enabled (cgroup v2's rule of no internal processes), again when one appears
// meanwhile, a bounded number of times; nothing is written where the controllers are enabled already.
func TestDelegationPrepare(t *testing.T) {
	for _, tc := range []struct {
		name     string
		enabled  string // the scope's cgroup.subtree_control before
		pids     []string
		gone     []string // of pids, those that exit before they are moved
		onEnable func(f *fakeCgroups, dir string) error
		// want: the scope's cgroup.subtree_control and its leaf's processes after, and how many
		// writes were made; wantErr: a part of prepare's error.
		wantEnabled, wantLeaf string
		wantWrites            int
		wantErr               string
	}{
		{name: "moves the processes, then enables", pids: []string{"100", "200"},
			wantEnabled: "memory pids cpu", wantLeaf: "100 200", wantWrites: 3},
		{name: "a process exits meanwhile", pids: []string{"100", "200"}, gone: []string{"200"},
			wantEnabled: "memory pids cpu", wantLeaf: "100", wantWrites: 3},
		{name: "subtree_control already enabled", enabled: "memory pids cpu",
			wantEnabled: "memory pids cpu", wantLeaf: "", wantWrites: 0},
		{name: "a process appears while enabling", pids: []string{"100"},
			onEnable: func(f *fakeCgroups, dir string) error {
				if !slices.Contains(strings.Fields(f.read(filepath.Join(dir, "leaf"), "cgroup.procs")), "300") && f.read(dir, "cgroup.procs") == "" {
					f.file(dir, "cgroup.procs", "300") // forked by 100 before it moved
				}
				return nil
			},
			wantEnabled: "memory pids cpu", wantLeaf: "100 300", wantWrites: 4},
		{name: "processes keep appearing", pids: []string{"100"},
			onEnable: func(*fakeCgroups, string) error { return unix.EBUSY },
			wantErr:  "processes kept appearing", wantWrites: 1 + maxDelegRounds},
		{name: "refused", pids: []string{"100"},
			onEnable: func(*fakeCgroups, string) error { return unix.EOPNOTSUPP },
			wantErr:  "operation not supported", wantWrites: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCgroups(t)
			f.cgroup(scope, "cpu memory pids io", tc.enabled, tc.pids...)
			for _, p := range tc.gone {
				f.gone[p] = true
			}
			f.onEnable = tc.onEnable
			fs := f.fs(unix.CGROUP2_SUPER_MAGIC, "/"+scope)
			d, why := fs.detect()
			if d == nil {
				t.Fatal(why)
			}
			err := fs.prepare(d)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("prepare: %v; want an error with %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("prepare: %v", err)
			}
			if len(f.writes) != tc.wantWrites {
				t.Errorf("%d writes, want %d: %q", len(f.writes), tc.wantWrites, f.writes)
			}
			if tc.wantErr != "" {
				return
			}
			if got := f.read(scope, "cgroup.subtree_control"); got != tc.wantEnabled {
				t.Errorf("subtree_control %q, want %q", got, tc.wantEnabled)
			}
			if !d.enabled {
				t.Error("not marked enabled")
			}
			leaf := ""
			if _, err := os.Stat(filepath.Join(f.root, scope, "leaf")); err == nil {
				leaf = f.read(scope+"/leaf", "cgroup.procs")
			}
			if leaf != tc.wantLeaf || f.read(scope, "cgroup.procs") != "" {
				t.Errorf("leaf holds %q and the scope %q; want %q and none", leaf, f.read(scope, "cgroup.procs"), tc.wantLeaf)
			}
			// A second run finds everything done: it writes nothing.
			f.writes = nil
			d2, _ := f.fs(unix.CGROUP2_SUPER_MAGIC, "/"+scope+"/leaf").detect()
			if d2 == nil || f.rel(d2.dir) != scope || !d2.enabled {
				t.Fatalf("the next run's detect: %+v", d2)
			}
			if err := fs.prepare(d2); err != nil || len(f.writes) != 0 {
				t.Errorf("the next run's prepare: %v, writes %q", err, f.writes)
			}
		})
	}
}

// TestRecordedCgroup: gc takes from a dead run's dir only a run's cgroup (sbx-ID below the cgroup
// mount) that the caller owns.
func TestRecordedCgroup(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, content string }{
		{"another run's", "/sys/fs/cgroup/sbx-other"},
		{"outside the cgroup tree", "/tmp/sbx-abc"},
		{"not clean", "/sys/fs/cgroup/x/../sbx-abc"},
		{"missing", "/sys/fs/cgroup/no-such/sbx-abc"},
	} {
		if err := os.WriteFile(filepath.Join(dir, recordCgroupFile), []byte(tc.content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := Recorded(dir, "abc"); got != "" {
			t.Errorf("%s: recorded %q taken as %q", tc.name, tc.content, got)
		}
	}
	os.Remove(filepath.Join(dir, recordCgroupFile))
	if got := Recorded(dir, "abc"); got != "" {
		t.Errorf("nothing recorded: %q", got)
	}
}
