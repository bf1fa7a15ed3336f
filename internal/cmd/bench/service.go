package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// service is an `sbx serve` the bench started, on a socket of its own.
type service struct {
	cmd  *exec.Cmd
	sock string
	done chan struct{}
}

// startService starts argv (sbx serve, run by whoever argv says) listening on sock and waits until it
// does.
func startService(argv []string, sock string) (*service, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &service{cmd: cmd, sock: sock, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-s.done:
			return nil, errors.New("sbx serve ended")
		default:
		}
		if time.Now().After(deadline) {
			s.close()
			return nil, fmt.Errorf("sbx serve does not listen on %s", sock)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// close stops the service (SIGTERM, by its pid) and waits for it.
func (s *service) close() {
	s.cmd.Process.Signal(unix.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
}

// peakRSS is the service's peak resident memory so far, in bytes.
func (s *service) peakRSS() int64 { return vmHWM(s.cmd.Process.Pid) }

// vmHWM is the peak resident memory of pid, in bytes (0: unknown).
func vmHWM(pid int) int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// rootService starts root's sbx serve with a pool of warm sandboxes on a socket below dir; the runs
// that name it come from its pool (the bench's sbx exec and the service share the default state root).
func rootService(sbx, dir string, warm int) (*service, error) {
	sock := filepath.Join(dir, fmt.Sprintf("svc-%d", warm), "sbx.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		return nil, err
	}
	return startService([]string{sbx, "serve", "--socket", sock, "--warm", strconv.Itoa(warm), "--max-runs", "64"}, sock)
}

// userService starts u's sbx serve (pool of 2) on a socket in a directory of u's below dir.
func userService(sbx, dir string, u *user) (*service, error) {
	run := filepath.Join(dir, "user-svc")
	if err := os.MkdirAll(run, 0o700); err != nil {
		return nil, err
	}
	uid, _ := strconv.Atoi(u.uid)
	gid, _ := strconv.Atoi(u.gid)
	if err := os.Chown(run, uid, gid); err != nil {
		return nil, err
	}
	sock := filepath.Join(run, "sbx.sock")
	return startService(u.argvEnv([]string{"SBX_SERVICE=" + sock}, sbx, "serve", "--warm", "2"), sock)
}

// serviceEnv makes an sbx exec hand its run to s.
func (s *service) env() []string { return []string{"SBX_SERVICE=" + s.sock} }
