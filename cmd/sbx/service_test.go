package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/testutil"
	"github.com/sbx-dev/sbx/policy"
)

// testService is an `sbx serve` the test started (the test binary as sbx), on a socket of its own.
type testService struct {
	sock, stateRoot string
	cmd             *exec.Cmd
	errb            *bytes.Buffer
	done            chan struct{}
}

// startService starts sbx serve with flags, its state root stateRoot ("" = a fresh one) and env added
// to the test's environment, and waits until it listens. It is stopped (SIGTERM, by its pid) when the
// test ends, unless stopped before.
func startService(t *testing.T, stateRoot string, env []string, flags ...string) *testService {
	t.Helper()
	path, err := exec.LookPath("sbx")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "sbx-svc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if stateRoot == "" {
		stateRoot = filepath.Join(testStateParent(), "svc-"+filepath.Base(dir))
		t.Cleanup(func() { testutil.RemoveStateRoot(stateRoot) })
	}
	s := &testService{sock: filepath.Join(dir, "sbx.sock"), stateRoot: stateRoot, errb: &bytes.Buffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(path, append([]string{"serve", "--socket", s.sock}, flags...)...)
	s.cmd.Env = append(append(os.Environ(), stateRootEnv+"="+stateRoot, serviceEnv+"="), env...)
	s.cmd.Stderr = s.errb
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { s.stop(t) })
	deadline := time.Now().Add(testutil.Scaled(20 * time.Second))
	for {
		if c, err := net.Dial("unix", s.sock); err == nil {
			c.Close()
			return s
		}
		select {
		case <-s.done:
			t.Fatalf("sbx serve ended: %s", s.errb)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sbx serve does not listen on %s: %s", s.sock, s.errb)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop ends the service with SIGTERM and returns what it said on stderr.
func (s *testService) stop(t *testing.T) string {
	select {
	case <-s.done:
		return s.errb.String()
	default:
	}
	s.cmd.Process.Signal(unix.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(testutil.Scaled(30 * time.Second)):
		s.cmd.Process.Kill()
		<-s.done
		t.Errorf("sbx serve did not end on SIGTERM: %s", s.errb)
	}
	return s.errb.String()
}

// served is how many runs the stopped service says it carried out, and how many of them warm.
func served(t *testing.T, log string) (runs, warm int) {
	runs, warm, _ = servedFast(t, log)
	return runs, warm
}

// servedFast is served with the runs of those that were for a fast client (the C one, serve_raw.go).
func servedFast(t *testing.T, log string) (runs, warm, fast int) {
	m := regexp.MustCompile(`served (\d+) runs, (\d+) of them in a warm sandbox, (\d+) for a fast client; \d+ handed back`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("sbx serve did not say what it served: %s", log)
	}
	runs, _ = strconv.Atoi(m[1])
	warm, _ = strconv.Atoi(m[2])
	fast, _ = strconv.Atoi(m[3])
	return runs, warm, fast
}

// TestScriptsService runs the CLI's scripts (testdata/script) with every sbx exec handed to one sbx
// serve: the same statuses, output and reports as cold. Each script keeps its own state root, so the
// service carries out their runs cold in it (its pool serves its own state root: TestServiceWarm);
// the scripts that kill sbx itself to test a crash are skipped ([service]: the service then tears the
// run down, TestServiceCLIKilled).
func TestScriptsService(t *testing.T) {
	s := startService(t, "", nil, "--warm", "0") // its HOME is not the scripts' (testscript's /no-home): the caller's home is the request's
	p := scriptParams("testdata/script", "svc-")
	setup, cond := p.Setup, p.Condition
	p.Setup = func(env *testscript.Env) error {
		if err := setup(env); err != nil {
			return err
		}
		env.Setenv(serviceEnv, s.sock)
		return nil
	}
	p.Condition = func(c string) (bool, error) {
		if c == "service" {
			return true, nil
		}
		return cond(c)
	}
	testscript.Run(t, p)
	t.Cleanup(func() {
		// Registered after startService's: runs first, while the service still runs to be stopped here.
		log := s.stop(t)
		t.Log(log)
		runs, _ := served(t, log)
		if runs < 100 && flag.Lookup("test.run").Value.String() == "" { // the whole suite ran
			t.Errorf("the service carried out %d runs of the scripts; most sbx exec should have gone through it", runs)
		}
	})
}

// sbxRun runs the test binary as sbx with args and env added, and returns its stdout, stderr and
// exit status.
func sbxRun(t *testing.T, dir string, env []string, args ...string) (string, string, int) {
	t.Helper()
	path, err := exec.LookPath("sbx")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// comparable is a report without what differs between any two runs: ids, times, pids (also the
// sandbox's own: its init may have forked once more or less before the command), timings,
// readings of CPU, pipe inodes, and the exec stream (whose reading of a short-lived process's argv
// can come too late in any run).
func comparable(t *testing.T, js string) map[string]any {
	t.Helper()
	b := regexp.MustCompile(`"(host_pid|pid|start_ticks|started|time|target|[a-z_]*cpu_ms)": *("[^"]*"|[0-9.e+-]+)`).
		ReplaceAll([]byte(js), []byte(`"$1":0`))
	b = regexp.MustCompile(`pid [0-9]+`).ReplaceAll(b, []byte("pid N"))
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v: %s", err, js)
	}
	for _, k := range []string{"run_id", "started_at", "ended_at", "duration_ms", "timings_ms", "sbx_version"} {
		delete(m, k)
	}
	if p, ok := m["processes"].(map[string]any); ok {
		delete(p, "execs")
		delete(p, "execs_total")
	}
	return m
}

// TestServiceWarm: runs through a service with a pool in the CLI's own state root come from warm
// sandboxes (sbx exec -v says so), with the exit status and the report (but for ids, times, pids and
// timings) of a cold run; a working directory replaced on the host is never shown from a sandbox built
// before; nothing is left when the service stops.
func TestServiceWarm(t *testing.T) {
	s := startService(t, "", nil, "--warm", "2")
	work := t.TempDir()
	env := []string{serviceEnv + "=" + s.sock, stateRootEnv + "=" + s.stateRoot}
	cmd := []string{"exec", "-v", "--json", "-", "--", "sh", "-c", "echo out >&2; sleep 30 & exit 3"}
	cold, coldErr, coldCode := sbxRun(t, work, []string{serviceEnv + "=off", stateRootEnv + "=" + s.stateRoot}, cmd...)
	if coldCode != exitViolation || !strings.Contains(coldErr, "cold start: "+serviceEnv+"=off") {
		t.Fatalf("cold run: status %d, stderr %s", coldCode, coldErr)
	}
	warm := 0
	for i := range 6 {
		// Every other run by the CLI's own client (the fast one when it can: serve_raw.go).
		env := env
		if i%2 == 1 {
			env = append(env, "_SBX_NO_FAST=1")
		}
		out, errs, code := sbxRun(t, work, env, cmd...)
		if code != exitViolation {
			t.Fatalf("run %d through the service: status %d, want %d; stderr %s", i, code, exitViolation, errs)
		}
		if !strings.Contains(errs, "went through the sbx service") {
			t.Fatalf("run %d did not go through the service: %s", i, errs)
		}
		if strings.Contains(errs, "(a warm sandbox)") {
			warm++
		}
		if !strings.Contains(errs, "out\n") || !strings.Contains(errs, "processes.left_running") {
			t.Errorf("run %d: the command's stderr or the human report is missing: %s", i, errs)
		}
		if a, b := comparable(t, out), comparable(t, cold); !reflect.DeepEqual(a, b) {
			ja, _ := json.MarshalIndent(a, "", " ")
			jb, _ := json.MarshalIndent(b, "", " ")
			t.Errorf("run %d: the report differs from a cold run's:\n%s\ncold:\n%s", i, ja, jb)
		}
		time.Sleep(testutil.Scaled(300 * time.Millisecond)) // the pool refills
	}
	if warm < 3 {
		t.Errorf("%d of 6 runs had a warm sandbox", warm)
	}
	// The working directory removed and made again: the pooled sandboxes show the old one.
	time.Sleep(testutil.Scaled(500 * time.Millisecond))
	if err := os.RemoveAll(work); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "new"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code := sbxRun(t, work, env, "exec", "-v", "-q", "--", "cat", "new")
	if code != 0 || out != "new\n" || strings.Contains(errs, "(a warm sandbox)") {
		t.Errorf("after the working directory was replaced: status %d, stdout %q, stderr %s", code, out, errs)
	}
	log := s.stop(t)
	if runs, _, fast := servedFast(t, log); runs != 7 || fast != 4 {
		t.Errorf("the service carried out %d runs, %d for the fast client, want 7 and 4: %s", runs, fast, log)
	}
	if err := checkClean(s.stateRoot); err != nil {
		t.Errorf("after the service stopped: %v", err)
	}
}

// TestServiceCLIKilled: an sbx exec killed while the service carries out its run (SIGKILL: no signal
// reaches the service) ends the run at once: its processes and state go, as a dead sbx's do at gc.
func TestServiceCLIKilled(t *testing.T) {
	s := startService(t, "", nil, "--warm", "0")
	path, _ := exec.LookPath("sbx")
	cmd := exec.Command(path, "exec", "-q", "--", "sh", "-c", "echo started; exec sleep 60")
	cmd.Env = append(os.Environ(), serviceEnv+"="+s.sock, stateRootEnv+"="+s.stateRoot)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "started\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the command did not start: %q", line)
	}
	runs, _ := os.ReadDir(filepath.Join(s.stateRoot, "runs"))
	if len(runs) != 1 {
		t.Errorf("%d runs in the state root while the command ran, want 1", len(runs))
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(testutil.Scaled(10 * time.Second))
	for checkClean(s.stateRoot) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the run of a killed sbx exec is still there: %v", checkClean(s.stateRoot))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if runs, _ := served(t, s.stop(t)); runs != 1 {
		t.Errorf("served %d runs, want 1", runs)
	}
}

// TestServiceFallback: sbx exec runs cold, and -v says why, when the socket is not the caller's
// service: missing, owned by another user, in a directory others may write, or answering nothing.
func TestServiceFallback(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	state := filepath.Join(testStateParent(), "svcfb-"+filepath.Base(dir))
	t.Cleanup(func() { testutil.RemoveStateRoot(state) })
	listen := func(path string) *net.UnixListener {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	// A listener that hangs up on every connection, as a service that fails would.
	hangup := filepath.Join(dir, "hangup.sock")
	ln := listen(hangup)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	others := filepath.Join(dir, "others.sock")
	listen(others)
	os.Chown(others, 65534, 65534)
	open := filepath.Join(t.TempDir(), "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	opensock := filepath.Join(open, "sbx.sock")
	listen(opensock)
	for _, c := range []struct{ sock, why string }{
		{filepath.Join(dir, "missing.sock"), "no service at"},
		{hangup, "the service did not "},
		{others, "is not a socket of the caller's"},
		{opensock, "is not the caller's alone"},
	} {
		out, errs, code := sbxRun(t, dir, []string{serviceEnv + "=" + c.sock, stateRootEnv + "=" + state}, "exec", "-v", "-q", "--", "echo", "hi")
		if code != 0 || out != "hi\n" || !strings.Contains(errs, "cold start: ") || !strings.Contains(errs, c.why) {
			t.Errorf("%s: status %d, stdout %q, stderr %s; want a cold run saying %q", c.sock, code, out, errs, c.why)
		}
	}
}

// TestServiceRefusesOthers: the service answers nothing to a client of another uid, even when its
// socket's mode lets that client connect.
func TestServiceRefusesOthers(t *testing.T) {
	s := startService(t, "", nil, "--warm", "0")
	os.Chmod(filepath.Dir(s.sock), 0o755)
	os.Chmod(s.sock, 0o666)
	probe := `import socket,sys,json,struct
s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
b=json.dumps({"proto":1}).encode()
try:
    s.sendall(struct.pack(">I",len(b))+b); print(len(s.recv(100)))
except (ConnectionResetError, BrokenPipeError): print(0)`
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", probe, s.sock).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Errorf("a client of uid 65534: %v, %s; want the connection closed unanswered (0 bytes)", err, out)
	}
	if runs, _ := served(t, s.stop(t)); runs != 0 {
		t.Errorf("served %d runs", runs)
	}
}

// TestServiceFrames: a frame beyond the bound, and descriptors where none belong, are refused before
// anything is read into memory or kept open.
func TestServiceFrames(t *testing.T) {
	pair := func() (*net.UnixConn, *net.UnixConn) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		conn := func(fd int) *net.UnixConn {
			f := os.NewFile(uintptr(fd), "pair")
			c, err := net.FileConn(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			return c.(*net.UnixConn)
		}
		a, b := conn(fds[0]), conn(fds[1])
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}
	a, b := pair()
	hdr := binary.BigEndian.AppendUint32(nil, maxServiceFrame+1)
	a.Write(hdr)
	var v serviceMsg
	if _, err := readFrame(b, &v, 0); err == nil || !strings.Contains(err.Error(), "exceeds the bound") {
		t.Errorf("an oversized frame: %v", err)
	}
	a, b = pair()
	if err := writeFrame(a, serviceMsg{Go: true}, int(os.Stdin.Fd())); err != nil {
		t.Fatal(err)
	}
	if _, err := readFrame(b, &v, 0); err != errFrameFDs {
		t.Errorf("a frame with a descriptor where none belongs: %v", err)
	}
	a, b = pair()
	if err := writeFrame(a, serviceRequest{Proto: 1}, int(os.Stdin.Fd()), int(os.Stdout.Fd()), int(os.Stderr.Fd())); err != nil {
		t.Fatal(err)
	}
	var req serviceRequest
	files, err := readFrame(b, &req, 3)
	if err != nil || len(files) != 3 || req.Proto != 1 {
		t.Fatalf("a request with its stdio: %v, %d files", err, len(files))
	}
	for _, f := range files {
		if fl, _ := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC == 0 {
			t.Errorf("a passed descriptor is not close-on-exec")
		}
		f.Close()
	}
}

// TestPlanSurvivesJSON: the CLI hands the service its compiled plan as JSON: every field of a Plan must
// come back the same (an unexported or json:"-" field would be lost, and the service would build
// another sandbox than the CLI compiled).
func TestPlanSurvivesJSON(t *testing.T) {
	var check func(reflect.Type, string)
	seen := map[reflect.Type]bool{}
	check = func(ty reflect.Type, at string) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Map {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] || ty.PkgPath() != reflect.TypeOf(policy.Plan{}).PkgPath() {
			return
		}
		seen[ty] = true
		for i := range ty.NumField() {
			f := ty.Field(i)
			if at == "Plan" && f.Name == "resolved" {
				continue // for Hash (exports), not for a run
			}
			if !f.IsExported() || f.Tag.Get("json") == "-" {
				t.Errorf("%s.%s does not survive JSON", at, f.Name)
			}
			check(f.Type, at+"."+f.Name)
		}
	}
	check(reflect.TypeOf(policy.Plan{}), "Plan")
	for _, name := range policy.Builtins() {
		plan, err := compilePlan("", name, t.TempDir(), os.Environ(), policy.Overrides{RW: []string{"/tmp"}, Allow: []string{"10.0.0.1:443"}})
		if err != nil {
			t.Fatal(name, err)
		}
		a, _ := json.Marshal(plan)
		var back policy.Plan
		if err := json.Unmarshal(a, &back); err != nil {
			t.Fatal(name, err)
		}
		if b, _ := json.Marshal(&back); !bytes.Equal(a, b) {
			t.Errorf("%s: the plan changes through JSON:\n%s\n%s", name, a, b)
		}
	}
}

// TestServiceRootless: an ordinary user's sbx serve carries out that user's sbx exec runs, from warm
// sandboxes; root's sbx exec does not use it (not a socket of root's), and nothing of the user is left
// once it stopped.
func TestServiceRootless(t *testing.T) {
	u, bin := rootlessUser(t, "creates the ordinary user the service runs as")
	// On the disk (/tmp), not /run: a rootless overlay's layer needs user.* xattrs, which a tmpfs
	// keeps only from Linux 6.6 on (Debian 12's 6.1 refuses, as the default state root's probe knows).
	base, err := os.MkdirTemp("", "svc-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o711)
	work, state, run := filepath.Join(base, "work"), filepath.Join(base, "state"), filepath.Join(base, "run")
	for _, d := range []string{work, state, run} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chown(d, u.uid, u.gid)
	}
	sock := filepath.Join(run, "sbx.sock")
	// setpriv ... env -i NAME=VALUE... bin: the user's runtime directory, where its socket is found.
	a := u.argv(bin, work, state)
	argv := append(append(slices.Clone(a[:len(a)-1]), "XDG_RUNTIME_DIR="+run), a[len(a)-1])
	srv := exec.Command(argv[0], append(argv[1:], "serve", "--warm", "2")...)
	srv.Dir = work
	var srvErr bytes.Buffer
	srv.Stderr = &srvErr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	stop := func() string {
		select {
		case <-done:
		default:
			srv.Process.Signal(unix.SIGTERM)
			select {
			case <-done:
			case <-time.After(testutil.Scaled(30 * time.Second)):
				srv.Process.Kill()
				<-done
				t.Errorf("the user's sbx serve did not end on SIGTERM")
			}
		}
		return srvErr.String()
	}
	t.Cleanup(func() { stop() })
	deadline := time.Now().Add(testutil.Scaled(20 * time.Second))
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the user's sbx serve does not listen on %s: %s", sock, srvErr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	warm := 0
	for i := range 4 {
		time.Sleep(testutil.Scaled(500 * time.Millisecond))
		cmd := exec.Command(argv[0], append(argv[1:], "exec", "-v", "-q", "--", "sh", "-c", "id -u; exit 7")...)
		cmd.Dir = work
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		ee, _ := err.(*exec.ExitError)
		if ee == nil || ee.ExitCode() != 7 || !strings.Contains(errb.String(), "went through the sbx service at "+sock) {
			t.Fatalf("run %d as the user: %v, stdout %q, stderr %s", i, err, out.String(), errb.String())
		}
		if strings.Contains(errb.String(), "(a warm sandbox)") {
			warm++
		}
	}
	if warm < 2 {
		t.Errorf("%d of 4 of the user's runs had a warm sandbox", warm)
	}
	// root's sbx exec, pointed at the user's socket, runs cold
	_, errs, code := sbxRun(t, work, []string{serviceEnv + "=" + sock, stateRootEnv + "=" + state + "-root"}, "exec", "-v", "-q", "--", "true")
	t.Cleanup(func() { testutil.RemoveStateRoot(state + "-root") })
	if code != 0 || !strings.Contains(errs, "is not a socket of the caller's") {
		t.Errorf("root's sbx exec at the user's socket: status %d, stderr %s", code, errs)
	}
	log := stop()
	if runs, w, fast := servedFast(t, log); runs != 4 || w != warm || fast != 4 {
		t.Errorf("the user's service served %d runs (%d warm, %d for the fast client), want 4 (%d, 4): %s", runs, w, fast, warm, log)
	}
	if left, _ := os.ReadDir(filepath.Join(state, "runs")); len(left) > 0 {
		t.Errorf("%d run dirs left in the user's state root", len(left))
	}
}

// TestServiceKilled: a service killed (SIGKILL) during a run: its sbx exec exits 125 saying so, and
// `sbx gc` removes what the service left, its run and its warm sandboxes.
func TestServiceKilled(t *testing.T) {
	s := startService(t, "", nil, "--warm", "1")
	env := []string{serviceEnv + "=" + s.sock, stateRootEnv + "=" + s.stateRoot}
	work := t.TempDir()
	// A first run makes the pool warm for the second's key.
	if _, errs, code := sbxRun(t, work, env, "exec", "-q", "--", "true"); code != 0 {
		t.Fatalf("first run: %d %s", code, errs)
	}
	path, _ := exec.LookPath("sbx")
	cmd := exec.Command(path, "exec", "-q", "--", "sh", "-c", "echo started; exec sleep 60")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "started\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the command did not start: %q", line)
	}
	time.Sleep(testutil.Scaled(300 * time.Millisecond)) // the pool refills beside the run
	s.cmd.Process.Kill()
	<-s.done
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitSetup || !strings.Contains(errb.String(), errServiceLost.Error()) {
		t.Errorf("sbx exec whose service was killed: %v, stderr %s; want status %d and %q", err, errb.String(), exitSetup, errServiceLost)
	}
	out, errs, code := sbxRun(t, work, env, "gc")
	if code != 0 {
		t.Fatalf("sbx gc: %d %s %s", code, out, errs)
	}
	if err := checkClean(s.stateRoot); err != nil {
		t.Errorf("after sbx gc: %v (gc said %s)", err, out)
	}
}

// TestServiceOtherNamespaces: a process of the caller's uid in a user namespace of its own (a
// sandbox's, without root) can neither hand the service a run nor pose as the service: the service
// answers it nothing, and sbx exec runs cold rather than hand its run to a socket such a process
// listens on.
func TestServiceOtherNamespaces(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare is missing")
	}
	s := startService(t, "", nil, "--warm", "0")
	// root mapped to root in a user namespace of its own: the same uid on the host, another namespace
	client := `import socket,sys,json,struct
s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
b=json.dumps({"proto":1}).encode()
try:
    s.sendall(struct.pack(">I",len(b))+b); print(len(s.recv(100)))
except (ConnectionResetError, BrokenPipeError): print(0)`
	out, err := exec.Command("unshare", "--user", "--map-root-user", "/usr/bin/python3", "-c", client, s.sock).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Errorf("a client in another user namespace: %v, %s; want the connection closed unanswered", err, out)
	}
	if runs, _ := served(t, s.stop(t)); runs != 0 {
		t.Errorf("served %d runs", runs)
	}
	// A listener in another user namespace that answers "ready" to anyone (and "exit 0" to a fast client).
	dir := t.TempDir()
	sock := filepath.Join(dir, "sbx.sock")
	server := `import socket,sys,json,struct
l=socket.socket(socket.AF_UNIX); l.bind(sys.argv[1]); l.listen(1); print("up", flush=True)
for _ in range(2):  # the fast client's connection, then the CLI's
    c,_=l.accept()
    try:
        head=c.recv(13)
        # To the fast client, were it to ask: "exit 0" (the command never ran)
        b=b"exit\x000" if head[4:]==b"sbx-raw 1" else json.dumps({"ready":True}).encode()
        c.sendall(struct.pack(">I",len(b))+b); c.recv(1<<20)
    except OSError: pass`
	fake := exec.Command("unshare", "--user", "--map-root-user", "/usr/bin/python3", "-c", server, sock)
	up, _ := fake.StdoutPipe()
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Process.Kill(); fake.Wait() })
	if line, _ := bufio.NewReader(up).ReadString('\n'); line != "up\n" {
		t.Fatalf("the fake service did not start: %q", line)
	}
	state := filepath.Join(testStateParent(), "svcns-"+filepath.Base(dir))
	t.Cleanup(func() { testutil.RemoveStateRoot(state) })
	out2, errs, code := sbxRun(t, dir, []string{serviceEnv + "=" + sock, stateRootEnv + "=" + state}, "exec", "-v", "-q", "--", "echo", "hi")
	if code != 0 || out2 != "hi\n" || !strings.Contains(errs, "runs in another user namespace") {
		t.Errorf("sbx exec at a listener in another user namespace: status %d, stdout %q, stderr %s; want a cold run saying so", code, out2, errs)
	}
}
