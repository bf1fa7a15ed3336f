package supervisor

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

// pair returns both ends of a control socket: sbx's and the supervisor's.
func pair(t *testing.T) (*Conn, *Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sbx, sup := NewConn(os.NewFile(uintptr(fds[0]), "sbx")), NewConn(os.NewFile(uintptr(fds[1]), "supervisor"))
	t.Cleanup(func() { sbx.Close(); sup.Close() })
	return sbx, sup
}

func TestConnRun(t *testing.T) {
	for _, tc := range []struct {
		name    string
		started Started
		ws      unix.WaitStatus
	}{
		{"started, exit 3", Started{Pid: 2, DiagFD: 7, PidFD: 9}, unix.WaitStatus(3 << 8)},
		{"started, killed", Started{Pid: 9, DiagFD: -1, PidFD: -1}, unix.WaitStatus(unix.SIGKILL)},
		{"not found", Started{Code: ExitNotFound, DiagFD: 5, PidFD: -1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sbx, sup := pair(t)
			prep := Prepare{Read: []string{"/"}, Write: []string{"/tmp"}, Degrade: true}
			if err := sbx.SendPrepare(prep); err != nil {
				t.Fatal(err)
			}
			raw, err := sup.ReadPrepare()
			if err != nil {
				t.Fatal(err)
			}
			var gotPrep Prepare
			if err := json.Unmarshal(raw, &gotPrep); err != nil || !reflect.DeepEqual(gotPrep, prep) {
				t.Fatalf("preparation %+v (%v), want %+v", gotPrep, err, prep)
			}
			cfg := Config{Argv: [][]byte{[]byte("true"), {0xff}}, Env: [][]byte{[]byte("A=1")}, UID: 1000, GID: 1000}
			if err := sbx.SendGo(cfg); err != nil {
				t.Fatal(err)
			}
			raw, err = sup.ReadGo()
			if err != nil {
				t.Fatal(err)
			}
			var got Config
			if err := json.Unmarshal(raw, &got); err != nil || !reflect.DeepEqual(got, cfg) {
				t.Fatalf("config %+v (%v), want %+v", got, err, cfg)
			}
			if err := sup.SendStarted(tc.started); err != nil {
				t.Fatal(err)
			}
			st, err := sbx.ReadStarted()
			if err != nil || st != tc.started {
				t.Fatalf("started %+v (%v), want %+v", st, err, tc.started)
			}
			if st.Pid == 0 {
				return
			}
			if err := sup.SendExit(tc.ws); err != nil {
				t.Fatal(err)
			}
			if ws, err := sbx.ReadExit(); err != nil || ws != tc.ws {
				t.Fatalf("exit %v (%v), want %v", ws, err, tc.ws)
			}
		})
	}
}

func TestConnUnexpected(t *testing.T) {
	sbx, sup := pair(t)
	if err := sup.write("exit 0\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := sbx.ReadStarted(); !errors.Is(err, ErrProtocol) {
		t.Errorf("ReadStarted on exit: %v, want ErrProtocol", err)
	}
	if err := sup.write("pid 2 -1\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := sbx.ReadExit(); !errors.Is(err, ErrProtocol) {
		t.Errorf("ReadExit on pid: %v, want ErrProtocol", err)
	}
	if err := sbx.write("stop\n{}\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.ReadGo(); !errors.Is(err, ErrProtocol) {
		t.Errorf("ReadGo on stop: %v, want ErrProtocol", err)
	}
	sbx, sup = pair(t)
	if err := sbx.SendGo(Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.ReadPrepare(); !errors.Is(err, ErrProtocol) {
		t.Errorf("ReadPrepare on go: %v, want ErrProtocol", err)
	}
}
