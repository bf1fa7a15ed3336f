package netcontract

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Cleanup removes what a run whose sbx died left of its network: the namespace file (the namespace,
// its veth and the peer end in the uplink go with it once nothing holds them), and the host NAT when no
// live run uses it any more. Address slots and NAT references of dead runs are reclaimed by the next
// allocation; this takes them now. id is the run's Config.ID.
func Cleanup(id string) error {
	c := Config{ID: id}
	errs := []error{removeNetNS(c.nsPath())}
	errs = append(errs, releaseSlotsOf(c.nsPath()), reclaimNAT())
	return errors.Join(errs...)
}

// releaseSlotsOf frees the address slots held by the namespace file nsPath.
func releaseSlotsOf(nsPath string) error {
	files, _ := filepath.Glob(filepath.Join(slotDir, "*"))
	for _, f := range files {
		if owner, err := os.ReadFile(f); err == nil && string(owner) == nsPath {
			if err := os.Remove(f); err != nil {
				return fmt.Errorf("releasing address slot: %w", err)
			}
		}
	}
	return nil
}

// reclaimNAT removes the host NAT table when only dead runs reference it.
func reclaimNAT() error {
	hostFd, err := hostNS()
	if err != nil {
		return err
	}
	h := hostSide{fd: hostFd, dir: realHostDir}
	if !exists(h.users()) {
		return nil
	}
	unlock, err := lockFile(h.lock())
	if err != nil {
		return err
	}
	defer unlock()
	if len(natLiveUsers(h)) > 0 {
		return nil
	}
	return errors.Join(delNATTable(hostFd), restoreForwarding(h))
}
