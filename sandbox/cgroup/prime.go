package cgroup

import (
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sbx-dev/sbx/internal/cgprime"
	"github.com/sbx-dev/sbx/sandbox/internal/host"
	"golang.org/x/sys/unix"
)

// Primer keeps the wait that moving the sandbox's init into its cgroup would make off the critical
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
type Primer struct {
	stop chan struct{}
	done chan struct{}
}

const (
	primeEvery = 2 * time.Millisecond
	primeMax   = 2 * time.Second // bounds the priming of a Create that hangs elsewhere
)

// StartPrimer starts priming for a sandbox under stateRoot, on a goroutine of its own (finding
// sbx's cgroup reads a list of every process in it); nil without root. Stop it once the container runs.
func StartPrimer(stateRoot string) *Primer {
	if host.Rootless() {
		return nil
	}
	p := &Primer{stop: make(chan struct{}), done: make(chan struct{})}
	go p.prime(stateRoot)
	return p
}

// prime writes sbx's pid to its own cgroup.procs every primeEvery until Stop.
func (p *Primer) prime(stateRoot string) {
	defer close(p.done)
	procs := cgprime.Procs()
	if procs == "" {
		return
	}
	// Opened once: a write by name looks the path up through /sys each time, and those lookups wait
	// for the lock that every other run's cgroup and sysfs entries take while they are made.
	fd, err := unix.Open(procs, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return // as a failed write: the grace period is left to Apply
	}
	defer unix.Close(fd)
	last := openPrimed(stateRoot)
	defer last.close()
	pid := []byte(strconv.Itoa(os.Getpid()))
	deadline := time.After(primeMax)
	tick := time.NewTicker(primeEvery)
	defer tick.Stop()
	for {
		if last.due() {
			// Best effort: a failed write only leaves the grace period to Apply, as without priming.
			_, _ = unix.Write(fd, pid)
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

// primed is the time of the last write of any sbx under a state root (its primed file, mapped), in
// nanoseconds: runs that see a recent one do not repeat it. Mapped, reading and setting it costs no
// system call and no write to the state root's disk at each tick. nil: every run primes on its own.
type primed struct {
	mem []byte
}

// openPrimed maps the primed file of stateRoot; nil when it cannot.
func openPrimed(stateRoot string) *primed {
	f, err := os.OpenFile(filepath.Join(stateRoot, "primed"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil
	}
	defer f.Close() // the mapping stays
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	if st.Size < 8 && f.Truncate(8) != nil {
		return nil
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, 8, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil
	}
	return &primed{mem: mem}
}

func (l *primed) close() {
	if l != nil {
		unix.Munmap(l.mem)
	}
}

// due says whether no sbx primed within primeEvery, and if so takes the write to come for this one.
func (l *primed) due() bool {
	if l == nil {
		return true
	}
	t := (*int64)(unsafe.Pointer(&l.mem[0])) // page-aligned
	now := time.Now().UnixNano()
	was := atomic.LoadInt64(t)
	if now-was < int64(primeEvery) && now >= was {
		return false
	}
	return atomic.CompareAndSwapInt64(t, was, now) // lost: another sbx writes now
}

// Stop ends the priming and waits for its last write.
func (p *Primer) Stop() {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.done
}
