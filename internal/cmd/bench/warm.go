package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpServer is `sbx mcp` over stdio with the bench as its MCP client, timing sbx_run from request to
// reply as an agent sees it.
type mcpServer struct {
	cmd  *exec.Cmd
	sess *mcp.ClientSession
}

// startMCP starts `sbx mcp` with args (--warm N, --concurrency N) and a workspace of its own below dir
// (the scratch directory changes under runc's runs, and the sandbox's build reads its workspace).
func startMCP(sbx, dir string, args ...string) (*mcpServer, error) {
	ws, err := os.MkdirTemp(dir, "mcp-")
	if err != nil {
		return nil, err
	}
	return startServer(append([]string{sbx, "mcp", "-w", ws}, args...))
}

// startServer starts the MCP server argv (sbx mcp, run by whoever argv says) over stdio.
func startServer(argv []string) (*mcpServer, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "sbx-bench", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return nil, fmt.Errorf("starting sbx mcp: %w", err)
	}
	return &mcpServer{cmd: cmd, sess: sess}, nil
}

// call runs argv through sbx_run and returns the wall time from request to reply in ms.
func (m *mcpServer) call(argv ...string) (float64, error) {
	t := time.Now()
	res, err := m.sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "sbx_run", Arguments: map[string]any{"argv": argv}})
	d := time.Since(t)
	if err != nil {
		return 0, err
	}
	if res.IsError {
		return 0, fmt.Errorf("sbx_run: %v", res.Content)
	}
	return float64(d.Microseconds()) / 1000, nil
}

// peakRSS is the server's peak resident memory so far, in bytes.
func (m *mcpServer) peakRSS() int64 { return vmHWM(m.cmd.Process.Pid) }

// close ends the session; the server destroys its pool and exits.
func (m *mcpServer) close() { m.sess.Close() }

// burst is one round of many runs started at once.
type burst struct {
	name  string
	run   func() error  // one run
	pause time.Duration // before the burst
	after time.Duration // after it, before the next contender's
	ms    []float64
}

// settle is the least pause before each burst, so that every contender starts on a machine that has
// finished the previous burst's deferred work.
const settle = time.Second

// parallelRuns is how many runs a burst starts at once.
const parallelRuns = 20

// timeBurst starts parallelRuns runs at once and returns the wall time until the last one ended, in ms.
func timeBurst(run func() error) (float64, error) {
	var wg sync.WaitGroup
	errs := make(chan error, parallelRuns)
	t := time.Now()
	for range parallelRuns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- run()
		}()
	}
	wg.Wait()
	d := time.Since(t)
	close(errs)
	for err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return float64(d.Microseconds()) / 1000, nil
}

// benchBursts times rounds of parallelRuns runs at once, interleaved: cold sbx exec, sbx_run through a
// server whose pool holds parallelRuns sandboxes (refilled between rounds), runc and bwrap.
func benchBursts(sbx, dir string, runcArgv func(i int) []string, rounds int) error {
	srv, err := startMCP(sbx, dir, "--warm", strconv.Itoa(parallelRuns), "--concurrency", strconv.Itoa(parallelRuns))
	if err != nil {
		return err
	}
	defer srv.close()
	svc, err := rootService(sbx, dir, parallelRuns)
	if err != nil {
		return err
	}
	defer svc.close()
	var seq int
	var mu sync.Mutex
	command := func(argv []string, env ...string) func() error {
		return func() error {
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Dir = dir
			cmd.Env = append(append(os.Environ(), "SBX_SERVICE=off"), env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}
	}
	bs := []*burst{
		{name: "sbx exec -- true, cold", run: command([]string{sbx, "exec", "-q", "--", "true"})},
		// The pool refills in the background after a burst: the pause lets it, as an agent's think time would.
		// The pause after it keeps the refill and the teardowns of the pool's server out of the next
		// contender's burst.
		{name: "sbx_run true, warm pool (MCP)", pause: 3 * time.Second, after: 3 * time.Second, run: func() error { _, err := srv.call("true"); return err }},
		{name: "sbx exec -- true, sbx serve", pause: 3 * time.Second, after: 3 * time.Second,
			run: command([]string{sbx, "exec", "-q", "--", "true"}, svc.env()...)},
		{name: "runc run (busybox)", run: func() error {
			mu.Lock()
			seq++
			i := seq
			mu.Unlock()
			return command(runcArgv(100000 + i))()
		}},
		{name: "bwrap --unshare-all", run: command([]string{"bwrap", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"})},
	}
	// Each round runs the contenders in a new random order, each burst after the same settling pause:
	// a burst leaves work to the kernel after its last run has ended (network namespaces are freed by
	// a worker, cgroups and mounts are released lazily), and in a fixed order the contender after a
	// given one would always pay for it.
	for i := -1; i < rounds; i++ { // one warm-up round
		for _, j := range rand.Perm(len(bs)) {
			b := bs[j]
			d, err := retried(b)
			if err != nil {
				return fmt.Errorf("%s: %w", b.name, err)
			}
			if i >= 0 {
				b.ms = append(b.ms, d)
			}
		}
	}
	fmt.Printf("\n%d runs started at once, %d interleaved rounds (wall time until the last ended, ms)\n", parallelRuns, rounds)
	fmt.Printf("%-40s %8s %8s %10s %10s\n", "", "median", "p90", "runs/s", "vs runc")
	runc := float64(parallelRuns) / median(bs[3].ms) * 1000
	for _, b := range bs {
		tput := float64(parallelRuns) / median(b.ms) * 1000
		fmt.Printf("%-40s %8.1f %8.1f %10.1f %9.2fx\n", b.name, median(b.ms), pct(b.ms, 90), tput, tput/runc)
	}
	fmt.Printf("peak RSS of the sbx mcp server (pool of %d): %.1f MB\n", parallelRuns, float64(srv.peakRSS())/(1<<20))
	fmt.Printf("peak RSS of sbx serve (pool of %d): %.1f MB\n", parallelRuns, float64(svc.peakRSS())/(1<<20))
	return nil
}

// retried times a burst, again up to twice when a run failed: other work on the machine makes
// bwrap fail now and then (a mount below / vanishes while it binds / recursively).
func retried(b *burst) (float64, error) {
	var err error
	for range 3 {
		time.Sleep(max(b.pause, settle))
		var d float64
		if d, err = timeBurst(b.run); err == nil {
			time.Sleep(b.after)
			return d, nil
		}
	}
	return 0, err
}
