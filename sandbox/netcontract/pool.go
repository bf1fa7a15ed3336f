package netcontract

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// The address pool. Each run takes one slot: a /30 out of pool4 (peer .1, sandbox .2) and a /64 out of
// pool6 (peer ::1, sandbox ::2). Slots are files under slotDir, created with O_EXCL under a lock file, so
// that concurrent sbx processes never share one.
var (
	pool4 = netip.MustParsePrefix("10.199.0.0/16")
	pool6 = netip.MustParsePrefix("fd5b:5b00::/48")
)

const (
	runDir   = "/run/sbx"
	slotDir  = runDir + "/net/slots"
	poolLock = runDir + "/net/pool.lock"
	numSlots = 1 << 14 // /30s in a /16
)

// ErrPoolExhausted means that every address pair of the pool is in use.
var ErrPoolExhausted = errors.New("no free sandbox address pair")

// slot is one allocated address pair.
type slot struct {
	n    int
	file string
}

// addrs returns the peer and sandbox addresses of the slot with their prefix lengths.
func (s slot) addrs() (peer4, sbx4, peer6, sbx6 netip.Prefix) {
	b4 := pool4.Addr().As4()
	b4[2], b4[3] = byte(s.n>>6), byte(s.n<<2)
	base4 := netip.AddrFrom4(b4)
	b6 := pool6.Addr().As16()
	b6[6], b6[7] = byte(s.n>>8), byte(s.n)
	base6 := netip.AddrFrom16(b6)
	return netip.PrefixFrom(base4.Next(), 30), netip.PrefixFrom(base4.Next().Next(), 30),
		netip.PrefixFrom(base6.Next(), 64), netip.PrefixFrom(base6.Next().Next(), 64)
}

// allocSlot takes a free slot for the run whose namespace file is nsPath. A slot whose owner's namespace
// file is gone belongs to a crashed run and is taken over.
func allocSlot(nsPath string) (slot, error) {
	if err := os.MkdirAll(slotDir, 0o700); err != nil {
		return slot{}, fmt.Errorf("creating %s: %w", slotDir, err)
	}
	unlock, err := lockFile(poolLock)
	if err != nil {
		return slot{}, err
	}
	defer unlock()
	start := rand.IntN(numSlots) // start anywhere: fewer collisions with slots just freed
	for i := range numSlots {
		n := (start + i) % numSlots
		if n == 0 {
			continue // keep 10.199.0.0/30 out: easier to recognise the pool in `ip addr`
		}
		s := slot{n: n, file: filepath.Join(slotDir, strconv.Itoa(n))}
		if takeSlot(s.file, nsPath) {
			return s, nil
		}
	}
	return slot{}, ErrPoolExhausted
}

// takeSlot creates the slot file, replacing it when its owner is gone.
func takeSlot(file, nsPath string) bool {
	for range 2 {
		f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err == nil {
			_, err = f.WriteString(nsPath)
			f.Close()
			return err == nil
		}
		owner, err := os.ReadFile(file)
		if err != nil || exists(string(owner)) {
			return false
		}
		os.Remove(file)
	}
	return false
}

// exists says whether path exists; an empty path does not.
func exists(path string) bool {
	if path == "" {
		return false
	}
	_, err := os.Stat(path)
	return err == nil
}

// release frees the slot. Callers remove the peer's addresses first, so that the next owner never sees
// them twice in the uplink namespace.
func (s slot) release() error {
	if err := os.Remove(s.file); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("releasing address slot: %w", err)
	}
	return nil
}

// lockFile takes an exclusive flock on path, creating it.
func lockFile(path string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { unix.Close(fd) }, nil
}
