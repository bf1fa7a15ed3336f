package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/runner"
	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/netcontract"
)

// printError prints one "sbx: error:" line and the hint that goes with it, age style: lowercase, no
// trailing period. It is the only place sbx writes either.
func printError(w io.Writer, err error, hint string) {
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	fmt.Fprintf(w, "sbx: error: %s\n", msg)
	if hint != "" {
		fmt.Fprintf(w, "sbx: hint: %s\n", hint)
	}
}

// caller says who a hint is for.
type caller int

const (
	anyCaller caller = iota
	asRoot
	withoutRoot
)

// errorHint is the hint for errors that match is, for who.
type errorHint struct {
	is   error
	who  caller
	hint string
}

// errorHints are the hints for errors of sbx's packages that the CLI did not attach one to; the first
// match wins.
var errorHints = []errorHint{
	{errServiceLost, anyCaller, "the service's log says why (journalctl -u sbx, or --user -u sbx without root); 'sbx gc' removes what the run left; " + serviceEnv + "=off runs without the service"},
	{sandbox.ErrStateShare, anyCaller, "share a directory that neither contains nor lies in sbx's state root, or move the state root (" + stateRootEnv + ")"},
	{sandbox.ErrShare, anyCaller, "a path shared with --ro, --rw or filesystem.share must exist on the host"},
	{sandbox.ErrShareLink, anyCaller, "share the path a link leads to if you trust it (readlink -f PATH): sbx follows only root's links in a shared path, since a command of an earlier run may have planted any other"},
	{sandbox.ErrShareTarget, anyCaller, "share the path a link leads to, not the link (readlink -f PATH), or give filesystem.share a path inside the sandbox that leads through no link"},
	{sandbox.ErrLimitLow, anyCaller, "raise limits.nofile in the profile to 64 or more; a command that must hold fewer files can lower its own limit (ulimit -n N) as its first step"},
	{sandbox.ErrLimit, anyCaller, "lower limits.nofile in the profile to at most sbx's hard limit (ulimit -Hn), or start sbx with a higher one (ulimit -Hn N as root; LimitNOFILE= for a service)"},
	{runner.ErrChangesDir, anyCaller, "give --changes a directory outside every --rw share and sbx's state root, e.g. a fresh one under /tmp"},
	{sandbox.ErrNoCgroup, anyCaller, "run sbx as root, or drop limits.require from the profile to run with rlimits instead (the report's notes say which limit holds)"},
	{sandbox.ErrStateRootShown, anyCaller, "without root, keep the state root (" + stateRootEnv + ", else $XDG_RUNTIME_DIR/sbx or ~/.local/state/sbx) below a directory the profile hides, as /home, /root and /tmp are in the built-in profiles, or below $XDG_RUNTIME_DIR"},
	{sandbox.ErrRootless, anyCaller, "without root, pasta is the sandbox's uplink: drop --uplink-netns (network.uplink_netns), or run sbx as root"},
	{netcontract.ErrNoPasta, anyCaller, "without root the network contract needs pasta (apt-get install passt) and /dev/net/tun open to the caller (mode 0666); 'sbx version' shows both"},
	{sandbox.ErrStateRoot, anyCaller, "put the state root (" + stateRootEnv + ") where every directory on the way down is searchable (mode 0711 or 0755), as /run/sbx is"},
	{sandbox.ErrNoIDMap, anyCaller, "the working tree is shown to the command through an idmapped mount (kernel 5.12+, overlayfs on idmapped layers 5.19+); without it only root can hand it over"},
	{sandbox.ErrNotSupported, anyCaller, "this kernel lacks a feature the profile requires; see docs/requirements.md"},
	{sandbox.ErrUsernsRestricted, anyCaller, "install sbx's AppArmor profile, which grants its binaries user namespaces: sudo make install-apparmor (make install does it too) loads /etc/apparmor.d/sbx for the binaries in PREFIX/bin (/usr/local/bin): run those; or run sbx as root"},
	{os.ErrPermission, withoutRoot, rootlessHint},
	{sandbox.ErrSetup, withoutRoot, rootlessHint},
	{os.ErrPermission, asRoot, "sbx creates namespaces, cgroups and mounts: run it as root (sudo sbx ...)"},
	{sandbox.ErrSetup, asRoot, "run 'sbx gc' to remove what earlier runs left behind, then try again"},
}

const rootlessHint = "'sbx version' shows what this host gives sbx without root; run 'sbx gc' to remove what earlier runs left behind"

// hintFor finds a hint for an error from one of sbx's packages: the profile's own (policy.Hint), else
// the first of errorHints that matches.
func hintFor(err error) string {
	if se := (*serviceError)(nil); errors.As(err, &se) {
		return se.hint // the service's hintFor, where the error's kind was still known
	}
	if h := policy.Hint(err); h != "" {
		return h
	}
	if se := (*sandbox.SupervisorError)(nil); errors.As(err, &se) {
		if se.Hint != "" {
			return se.Hint
		}
		return "the supervisor inside the sandbox (bin/sbx-init) refused what sbx sent it: use the bin/sbx-init of the same build as bin/sbx"
	}
	who := asRoot
	if os.Geteuid() != 0 {
		who = withoutRoot
	}
	for _, h := range errorHints {
		if (h.who == anyCaller || h.who == who) && errors.Is(err, h.is) {
			return h.hint
		}
	}
	return ""
}

// needCommand is the error of a subcommand that runs a command but was given none.
func needCommand(sub string) error {
	return setupError(errors.New("no command given"), "put the command after --, e.g. sbx "+sub+" -- sh -c 'echo hi'")
}
