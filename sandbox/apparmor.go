package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// AppArmor's restriction of unprivileged user namespaces (Ubuntu from 23.10 on, 24.04 LTS among them:
// kernel.apparmor_restrict_unprivileged_userns=1): a program that runs unconfined, with no profile of
// its own that grants `userns,`, may still create a user namespace, but Ubuntu's policy moves it into
// its unprivileged_userns profile there, which denies every capability. The namespace's root then can
// write no map from inside (bubblewrap's and unshare's "setting up uid map: Permission denied"), mount
// nothing, bring up no interface. sbx writes the maps from outside, as the unconfined parent, so
// without root what is refused is most likely its supervisor's first mount (EACCES) or first use of a
// capability (EPERM); a refused map write is the same effect, seen earlier. The fix is a profile for
// sbx's binaries (contrib/apparmor/sbx, which make install loads where AppArmor runs), or running sbx
// as root: the restriction spares callers with CAP_SYS_ADMIN.

// ErrUsernsRestricted is matched by the failure of a rootless start that AppArmor's restriction of
// unprivileged user namespaces caused: the restriction applies to this caller (the sysctl is 1, sbx runs
// without root and unconfined) and the kernel refused the sandbox's supervisor something, or the user
// namespace was made and its id maps were refused where AppArmor is enabled, whatever the sysctl says.
// The error also matches ErrSetup.
var ErrUsernsRestricted = errors.New("AppArmor refuses user namespaces to unconfined programs (kernel.apparmor_restrict_unprivileged_userns=1)")

// usernsFix is what lifts the restriction, for `sbx version`'s detail.
const usernsFix = "install sbx's AppArmor profile (sudo make install-apparmor; /etc/apparmor.d/sbx, for the binaries in PREFIX/bin) or run sbx as root"

// What the detection reads.
const (
	restrictSysctl  = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"
	labelFile       = "/proc/self/attr/apparmor/current" // AppArmor's own (Linux 5.8+, beside other LSMs)
	labelFileOld    = "/proc/self/attr/current"          // the major LSM's, AppArmor's where it is that
	apparmorEnabled = "/sys/module/apparmor/parameters/enabled"
)

// apparmorHost is what the detection asks of the host: the effective uid and files' contents; tests
// replace both.
type apparmorHost struct {
	euid     func() int
	readFile func(string) ([]byte, error)
}

var hostAppArmor = apparmorHost{euid: os.Geteuid, readFile: os.ReadFile}

// restriction says whether AppArmor's restriction of user namespaces applies to this caller: without
// root, with the sysctl at 1, and running unconfined (a profile of its own, such as sbx's, has a label
// of its own and decides itself). detail says why, or, where a profile decides, which one: "" when the
// restriction is not in force at all.
func (h apparmorHost) restriction() (bool, string) {
	if h.euid() == 0 {
		return false, ""
	}
	b, err := h.readFile(restrictSysctl)
	if err != nil {
		return false, ""
	}
	if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err != nil || v != 1 {
		return false, ""
	}
	label, ok := h.label()
	switch {
	case !ok:
		return false, "kernel.apparmor_restrict_unprivileged_userns is 1 and sbx's AppArmor label cannot be read"
	case label == "unconfined":
		return true, "AppArmor gives programs without a profile no capabilities in user namespaces (kernel.apparmor_restrict_unprivileged_userns=1), and sbx runs unconfined: " + usernsFix
	}
	return false, "sbx runs under AppArmor profile " + label + ", whose userns rule decides"
}

// label is the caller's AppArmor label as the kernel writes it: "unconfined", or a profile's name with
// its mode ("sbx (unconfined)", "snap.x (enforce)").
func (h apparmorHost) label() (string, bool) {
	b, err := h.readFile(labelFile)
	if err != nil {
		b, err = h.readFile(labelFileOld)
	}
	if err != nil {
		return "", false
	}
	l := strings.TrimRight(string(b), "\x00\n ")
	return l, l != ""
}

// enabled says whether AppArmor is enabled in this kernel.
func (h apparmorHost) enabled() bool {
	b, err := h.readFile(apparmorEnabled)
	return err == nil && strings.TrimSpace(string(b)) == "Y"
}

// usernsRefusal is err, the failure of a rootless start (the supervisor's start, its build of the
// sandbox, libcontainer's init), as an ErrUsernsRestricted when AppArmor's restriction is the cause:
// the restriction applies to this caller and the kernel refused something (EPERM, EACCES), or, where
// AppArmor is enabled, the effect showed whatever the sysctl says: the namespace was made and its maps
// were refused (idMapRefused). A mount refused alone is not taken for the effect: a mount locked by
// the host's namespace is refused the same way, on hosts with AppArmor and without the restriction
// (Debian's). Other errors, and every error as root, are returned as they are.
func usernsRefusal(err error) error { return hostAppArmor.refusal(err) }

func (h apparmorHost) refusal(err error) error {
	if err == nil || h.euid() == 0 || errors.Is(err, ErrUsernsRestricted) {
		return err
	}
	restricted, _ := h.restriction()
	why := ErrUsernsRestricted.Error()
	switch {
	case restricted && refused(err):
	case idMapRefused(err) && h.enabled():
		why = "AppArmor refused the user namespace's id maps, the effect of its restriction of user namespaces to unconfined programs (kernel.apparmor_restrict_unprivileged_userns is not 1 here)"
	default:
		return err
	}
	// The supervisor's own hint (a security module or a locked mount) is the guess this replaces.
	if se, ok := err.(*SupervisorError); ok {
		err = errors.New(se.Error())
	}
	return &usernsRestrictedError{why: why, err: err}
}

// usernsRestrictedError is a rootless start that AppArmor's restriction refused, with what failed.
type usernsRestrictedError struct {
	why string
	err error
}

func (e *usernsRestrictedError) Error() string { return e.why + ": " + e.err.Error() }
func (e *usernsRestrictedError) Unwrap() error { return e.err }

// Is makes it match ErrUsernsRestricted and ErrSetup.
func (e *usernsRestrictedError) Is(target error) bool {
	return target == ErrUsernsRestricted || target == ErrSetup
}

// idMapRefused says whether err is the refusal of a new user namespace's maps: a write of its uid_map,
// gid_map or setgroups refused with EPERM (or EACCES, AppArmor's answer for a file), as vspawn's writes
// report it. os/exec's start writes the maps between its clone and its exec and reports their failure
// as the exec's ("fork/exec PATH: operation not permitted"); no other step of that start (setsid, the
// parent-death signal) fails with EPERM, so EPERM there is the maps'.
func idMapRefused(err error) bool {
	var pe *os.PathError
	if !errors.As(err, &pe) || !(errors.Is(pe.Err, unix.EPERM) || errors.Is(pe.Err, unix.EACCES)) {
		return false
	}
	switch filepath.Base(pe.Path) {
	case "uid_map", "gid_map", "setgroups":
		return strings.HasPrefix(pe.Path, "/proc/")
	}
	return pe.Op == "fork/exec" && errors.Is(pe.Err, unix.EPERM)
}

// refused says whether the kernel refused what err is about with EPERM or EACCES: in the error chain,
// or in the words of the supervisor and of libcontainer's init, which report their failures as text.
func refused(err error) bool {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, unix.EPERM.Error()) || strings.Contains(msg, unix.EACCES.Error())
}
