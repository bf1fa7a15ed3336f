package observe

import (
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseStat(t *testing.T) {
	// Fields after comm: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
	// cutime cstime priority nice threads itrealvalue starttime ...
	tail := " S 41 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615"
	tests := []struct {
		name     string
		line     string
		wantComm string
		wantPPid int
		wantErr  bool
	}{
		{"plain", "77 (sleep)" + tail, "sleep", 41, false},
		{"spaces in comm", "77 (my daemon)" + tail, "my daemon", 41, false},
		{"parens in comm", "77 (a) S 1 (b)" + tail, "a) S 1 (b", 41, false},
		{"no comm", "77 sleep" + tail, "", 0, true},
		{"truncated", "77 (sleep) S 41", "", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := parseStat([]byte(tt.line))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if st.comm != tt.wantComm || st.ppid != tt.wantPPid || st.start != 987654 || st.state != 'S' {
				t.Errorf("got %+v, want comm %q ppid %d start 987654 state S", st, tt.wantComm, tt.wantPPid)
			}
		})
	}
}

func TestParseStatus(t *testing.T) {
	status := "Name:\tsleep\nUid:\t1000\t1000\t1000\t1000\nGid:\t0\t0\t0\t0\nNSpid:\t4242\t7\nNSpgid:\t1\n"
	st, err := parseStatus([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	if st.uid != 1000 || !slices.Equal(st.nspid, []int{4242, 7}) {
		t.Errorf("got %+v, want uid 1000 nspid [4242 7]", st)
	}
	if _, err := parseStatus([]byte("Name:\tx\n")); err == nil {
		t.Error("status without NSpid: want an error")
	}
}

func TestParseCmdline(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"argv", "sh\x00-c\x00echo x\x00", []string{"sh", "-c", "echo x"}},
		{"kernel thread or zombie", "", []string{}},
		{"empty argument kept", "a\x00\x00b\x00", []string{"a", "", "b"}},
		{"rewritten without NULs", "nginx: worker process", []string{"nginx: worker process"}},
	}
	for _, tt := range tests {
		if got := parseCmdline([]byte(tt.in)); !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestNewFD(t *testing.T) {
	tests := []struct {
		target      string
		wantKind    string
		wantTarget  string
		wantDeleted bool
	}{
		{"/tmp/log", "file", "/tmp/log", false},
		{"/tmp/log (deleted)", "file", "/tmp/log", true},
		{"socket:[123]", "socket", "socket:[123]", false},
		{"pipe:[9]", "pipe", "pipe:[9]", false},
		{"/memfd:payload (deleted)", "memfd", "/memfd:payload", false},
		{"anon_inode:[eventpoll]", "anon", "anon_inode:[eventpoll]", false},
		{"/dev/null", "dev", "/dev/null", false},
	}
	for _, tt := range tests {
		fd := newFD(3, tt.target)
		if fd.Kind != tt.wantKind || fd.Target != tt.wantTarget || fd.Deleted != tt.wantDeleted {
			t.Errorf("newFD(%q) = %+v, want kind %s target %s deleted %v", tt.target, fd, tt.wantKind,
				tt.wantTarget, tt.wantDeleted)
		}
	}
	if got := socketInode("socket:[4026531993]"); got != 4026531993 {
		t.Errorf("socketInode = %d", got)
	}
}

// TestReadFDsBounded: a process with more fds than are listed has every one counted, but the targets
// read past MaxFDs stop at the reader's budget (maxExtraFDReads, all its processes together): a command
// leaving many processes with huge fd tables cannot hold the observation for a readlink each.
func TestReadFDsBounded(t *testing.T) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	const extra = 3000
	if rl.Max < MaxFDs+extra+64 {
		t.Skipf("needs an open-files hard limit above %d, have %d", MaxFDs+extra+64, rl.Max)
	}
	saved := rl
	rl.Cur = rl.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &saved)
	null, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(null)
	for range MaxFDs + extra {
		fd, err := unix.FcntlInt(uintptr(null), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
	}
	r := newProcReader()
	r.extraReads = maxExtraFDReads - 100 // what earlier processes of the same reader spent
	var p rawProc
	if err := r.readFDs("/proc/self/fd", &p); err != nil {
		t.Fatal(err)
	}
	if p.FDsTotal < MaxFDs+extra || len(p.FDs) != MaxFDs || !p.FDsTruncated {
		t.Errorf("fds total %d, listed %d, truncated %v; want at least %d, %d, true", p.FDsTotal, len(p.FDs), p.FDsTruncated, MaxFDs+extra, MaxFDs)
	}
	if r.extraReads != maxExtraFDReads {
		t.Errorf("read %d targets past the listed ones in all, want the budget %d", r.extraReads, maxExtraFDReads)
	}
}
