package sandbox

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sbx-dev/sbx/internal/cgprime"
	"golang.org/x/sys/unix"
)

// cgroupPrimer keeps the wait that moving the sandbox's init into its cgroup would make off the critical
// path.
//
// Every write to a cgroup.procs file takes the kernel's cgroup_threadgroup_rwsem for writing. When no
// writer held it lately, that first waits for an RCU grace period (rcu_sync_enter): 5-20 ms on this
// kind of machine, most of runc's own start-up time, and libcontainer's Apply pays it between starting
// its init and letting it go on. A writer that comes while another one waits shares that grace period,
// and one that comes within a grace period after the last one left waits for none. So while a sandbox
// is built, sbx writes its own pid to the cgroup it is in (no process moves) every primeEvery: the grace
// period runs while sbx mounts the overlays and starts libcontainer's init, and Apply finds the lock
// ready. Where the kernel needs no grace period (cgroup v2 mounted with favordynmods) each write costs
// microseconds. Without root there is nothing to prime: no cgroup is made.
//
// Each write also holds up every fork and exit on the host for a moment, so the runs of one host prime
// together: a write that another sbx made less than primeEvery ago (the time is in the state root's
// primed file) is not repeated.
//
// sbx exec and sbx probe start the first grace period earlier still, from a package init before main
// (internal/cgprime): 2.5 ms after the process starts instead of 5.5 ms, measured here.
type cgroupPrimer struct {
	stop chan struct{}
	done chan struct{}
}

const (
	primeEvery = 2 * time.Millisecond
	primeMax   = 2 * time.Second // bounds the priming of a Create that hangs elsewhere
)

// startCgroupPrimer starts priming for a sandbox under stateRoot, on a goroutine of its own (finding
// sbx's cgroup reads a list of every process in it); nil without root. Stop it once the container runs.
func startCgroupPrimer(stateRoot string) *cgroupPrimer {
	if Rootless() {
		return nil
	}
	p := &cgroupPrimer{stop: make(chan struct{}), done: make(chan struct{})}
	go p.prime(stateRoot)
	return p
}

// prime writes sbx's pid to its own cgroup.procs every primeEvery until Stop.
func (p *cgroupPrimer) prime(stateRoot string) {
	defer close(p.done)
	procs := cgprime.Procs()
	if procs == "" {
		return
	}
	// The shared time of the last write; without it every run primes on its own.
	last, err := os.OpenFile(filepath.Join(stateRoot, "primed"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err == nil {
		defer last.Close()
	} else {
		last = nil
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	deadline := time.After(primeMax)
	tick := time.NewTicker(primeEvery)
	defer tick.Stop()
	for {
		if due(last) {
			// Best effort: a failed write only leaves the grace period to Apply, as without priming.
			_ = os.WriteFile(procs, pid, 0)
		}
		select {
		case <-p.stop:
			return
		case <-deadline:
			return
		case <-tick.C:
		}
	}
}

// due says whether no sbx primed within primeEvery, and if so notes the time of the write to come.
func due(last *os.File) bool {
	if last == nil {
		return true
	}
	var b [8]byte
	now := time.Now().UnixNano()
	if n, _ := last.ReadAt(b[:], 0); n == len(b) {
		if t := int64(binary.NativeEndian.Uint64(b[:])); now-t < int64(primeEvery) && now >= t {
			return false
		}
	}
	binary.NativeEndian.PutUint64(b[:], uint64(now))
	last.WriteAt(b[:], 0)
	return true
}

// Stop ends the priming and waits for its last write.
func (p *cgroupPrimer) Stop() {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.done
}
