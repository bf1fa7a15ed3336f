package sandbox

import (
	"os"
	"os/user"
	"path/filepath"
	"slices"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/sandbox/rootfs"
)

// DecoyAccesses lists the decoys the command touched, with what it did. Call it before anything reads
// the writable layer (the file changes' content comparison would read a decoy, and so set its access
// time).
func (s *Sandbox) DecoyAccesses() (touched []rootfs.Decoy, how []string) {
	for _, d := range s.rootfs.Decoys() {
		if a := d.Access(); a != "" {
			touched, how = append(touched, d), append(how, a)
		}
	}
	return touched, how
}

// Decoys lists the sandbox's decoys.
func (s *Sandbox) Decoys() []rootfs.Decoy { return s.rootfs.Decoys() }

// CallerHome is the home directory of the caller of this process: the sudo user's under sudo, else
// $HOME; "" when there is none.
func CallerHome() string { return CallerHomeFrom(os.Getenv) }

// CallerHomeFrom is CallerHome of a process whose environment getenv reads.
func CallerHomeFrom(getenv func(string) string) string {
	if name := getenv("SUDO_USER"); name != "" && os.Geteuid() == 0 {
		if u, err := user.Lookup(name); err == nil {
			return u.HomeDir
		}
		return ""
	}
	return getenv("HOME")
}

// decoyHomes are the home directories where decoys go: the sandbox's HOME, root's and the caller's
// (callerHome; "" = this process's caller's, CallerHome), each only when the profile hides it.
func decoyHomes(plan *policy.Plan, callerHome string) []string {
	if callerHome == "" {
		callerHome = CallerHome()
	}
	homes := []string{envValue(plan.Env, "HOME"), "/root", callerHome}
	var out []string
	for _, h := range homes {
		if h = filepath.Clean(h); filepath.IsAbs(h) && h != "/" && rootfs.BelowHidden(plan.Filesystem.Hidden, h) && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}
