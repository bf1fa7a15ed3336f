package netcontract

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/sbx-dev/sbx/internal/selfexe"
	"github.com/sbx-dev/sbx/policy"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Without root, sbx may not create a network namespace of its own, nor enter the sandbox's: setns into
// a network namespace needs CAP_SYS_ADMIN in sbx's own user namespace, and a multithreaded process may
// not enter a user namespace at all. The sandbox's network namespace is therefore made by libcontainer
// together with its user namespace, and the contract is attached to it once the sandbox's init exists:
//
//   - a helper (sbx itself in role HelperRole, started through nsenter so that it is inside the
//     sandbox's user and network namespaces before the Go runtime starts a thread) brings lo up, makes
//     the DNS filter's sockets (port 53 on dnsAddr) and a nftables netlink socket there, hands them to
//     sbx over a socket pair and exits once pasta's interface is up. It holds CAP_NET_ADMIN of the
//     sandbox's user namespace while it runs, before the command exists; the command never holds it.
//   - pasta (Debian passt) joins the same namespaces and gives the sandbox its uplink: a tap interface
//     with the host's address, whose traffic leaves through ordinary sockets of sbx's user, in sbx's
//     network namespace. No port is forwarded in either direction and the gateway is not mapped to the
//     host's loopback.
//   - sbx keeps the sockets: nftables commits sent on a netlink socket of the sandbox's namespace pass
//     the kernel's checks because the socket was opened with CAP_NET_ADMIN there and sbx's user owns
//     the sandbox's user namespace. The DNS filter serves on its sockets from sbx's process and asks the
//     upstream from sbx's own namespace, which is the uplink's.
//
// The contract, the always-deny list, the allow list, the DNS log and the denied record are then the
// same code as with root.

// HelperRole is the role argument of the helper that makes the sockets inside the sandbox.
const HelperRole = "__netns-sockets"

// dnsAddr is where the DNS filter listens inside a rootless sandbox (on lo, as systemd-resolved's stub);
// dnsClient is the source address of the sandbox's queries to it.
var (
	dnsAddr   = netip.MustParseAddr("127.0.0.53")
	dnsClient = netip.MustParseAddr("127.0.0.1")
)

// pastaPidFile names the pasta process of a run in its state dir, for gc.
const pastaPidFile = "pasta.pid"

// helperTimeout bounds the helper's work, pasta's start included.
const helperTimeout = 10 * time.Second

// ErrNoPasta is matched when the rootless uplink cannot start.
var ErrNoPasta = errors.New("pasta (Debian package passt) cannot give the sandbox its uplink")

// SetupRootless is SetupAsync for an sbx without root. It writes resolv.conf only: the container
// creates the namespace (NetNSPath is ""), and Attach builds the rest once the sandbox's init exists.
// Ready returns only after Attach; Close is safe at any point.
func SetupRootless(cfg Config) (*Net, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Net{cfg: cfg, fd: -1, uplinkFd: -1, nftSock: -1, rootless: true, ready: make(chan struct{})}
	if cfg.Net.Mode != policy.NetContract {
		close(n.ready)
		return n, nil
	}
	if _, err := exec.LookPath("pasta"); err != nil {
		close(n.ready)
		return nil, fmt.Errorf("%w: %w", ErrNoPasta, err)
	}
	n.link = pastaLink{}
	if err := n.writeResolvConf(); err != nil {
		close(n.ready)
		return nil, err
	}
	return n, nil
}

// Attach builds the network of a rootless sandbox whose init (host pid initPid) exists and has not
// started the command: the helper's sockets, pasta, the contract, the DNS filter. It returns at once;
// Ready says how it went.
func (n *Net) Attach(initPid int) {
	if !n.rootless || n.attachOnce.Swap(true) {
		return
	}
	if n.cfg.Net.Mode != policy.NetContract {
		return
	}
	go func() {
		defer close(n.ready)
		n.readyErr = n.attach(initPid)
	}()
}

// abandonAttach ends a rootless setup that was never attached, so that Ready and Close do not wait.
func (n *Net) abandonAttach() {
	if (n.none != nil || n.rootless && n.cfg.Net.Mode == policy.NetContract) && !n.attachOnce.Swap(true) {
		n.readyErr = errors.New("the sandbox's network was never attached")
		close(n.ready)
	}
}

// attach does Attach's work.
func (n *Net) attach(initPid int) error {
	own, err := ownAddrs()
	if err != nil {
		return err
	}
	n.own = own
	// pasta and the helper start together: the helper waits for pasta's tap anyway.
	if err := n.startPasta(initPid); err != nil {
		return err
	}
	h, err := startHelper(initPid)
	if err != nil {
		return err
	}
	defer h.close()
	n.nftSock = h.nft
	h.nft = -1
	if err := h.waitUplink(n.pastaDone); err != nil {
		return fmt.Errorf("%w: %w%s", ErrNoPasta, err, n.pastaOut())
	}
	if err := n.loadContract(n.own); err != nil {
		return err
	}
	pc, ln, err := h.dnsConns()
	if err != nil {
		return err
	}
	d, err := startDNSFilter(dnsFilterConfig{net: n.cfg.Net, listen: dnsAddr, client: dnsClient, uplinkFd: -1,
		learn: n.learn, pc: pc, ln: ln})
	if err != nil {
		pc.Close()
		ln.Close()
		return err
	}
	n.dns = d
	return nil
}

// ownAddrs are the subnets of sbx's own namespace (pasta copies the host's address into the sandbox, so
// these are the sandbox's neighbours too), read without entering any namespace.
func ownAddrs() ([]netip.Prefix, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink in sbx's network namespace: %w", err)
	}
	defer h.Close()
	return addrPrefixes(h)
}

// pastaLink is the uplink of a rootless sandbox: pasta's tap. Its addresses, as the contract and the
// DNS filter see them, are the DNS filter's on lo; the tap's own subnet is the host's, denied with it.
type pastaLink struct{}

var _ uplink = pastaLink{}

func (pastaLink) sandboxSide() error { return nil }
func (pastaLink) uplinkSide() error  { return nil }
func (pastaLink) remove() error      { return nil }
func (pastaLink) addrs() linkAddrs {
	return linkAddrs{peer4: netip.PrefixFrom(dnsAddr, 32), sbx4: netip.PrefixFrom(dnsClient, 32),
		peer6: netip.PrefixFrom(netip.IPv6Loopback(), 128), sbx6: netip.PrefixFrom(netip.IPv6Loopback(), 128)}
}

// pastaArgs join pasta to the init's namespaces: in the foreground (sbx owns its lifetime), the tap
// configured from the host's interface, no port forwarded either way (-t/-u: from the host into the
// sandbox, -T/-U: from the sandbox's lo to the host's), the gateway not mapped to the host's loopback.
// The namespaces are pasta's own descriptors 3 (user) and 4 (net), which sbx opened (pastaNS): a path
// under /proc/PID/ns would have pasta introspect another process, which a confined pasta may not do
// (Debian 12's AppArmor profile for passt has no ptrace rule: "Couldn't open user namespace
// /proc/PID/ns/user: Permission denied"), and a descriptor of its own it always may (the kernel leaves
// a process's introspection of itself to no security module); nor does AppArmor mediate opening the
// namespace file itself (nsfs is an internal mount).
func pastaArgs() []string {
	return []string{"-f", "-q", "--config-net", "-t", "none", "-u", "none", "-T", "none", "-U", "none",
		"--no-map-gw", "--no-dhcp", "--no-dhcpv6", "--no-ra", "--userns", "/proc/self/fd/3", "--netns", "/proc/self/fd/4"}
}

// pastaNS opens the init's user and network namespaces for pasta (its descriptors 3 and 4).
func pastaNS(initPid int) ([]*os.File, error) {
	var out []*os.File
	for _, ns := range []string{"user", "net"} {
		f, err := os.Open("/proc/" + strconv.Itoa(initPid) + "/ns/" + ns)
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			return nil, fmt.Errorf("the sandbox's %s namespace for pasta: %w", ns, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// maxPastaOut bounds what sbx keeps of pasta's messages.
const maxPastaOut = 4096

// startPasta starts pasta under its keeper (KeeperMain), which records pasta's pid in the run's state dir.
//
// pasta's own parent-death signal does not hold where a security module confines it: Debian's and
// Ubuntu's passt packages ship an AppArmor profile for it, and AppArmor (as SELinux) clears the
// parent-death signal of a process whose exec changes its confinement. A SIGKILLed sbx then left pasta
// running until gc. The keeper is sbx itself, unconfined (no transition clears its signal): its
// parent-death signal is SIGTERM, which it catches to kill pasta, its child, before it exits.
func (n *Net) startPasta(initPid int) error {
	pasta, err := exec.LookPath("pasta")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoPasta, err)
	}
	self, err := selfexe.Path()
	if err != nil {
		return fmt.Errorf("finding sbx's binary: %w", err)
	}
	ns, err := pastaNS(initPid)
	if err != nil {
		return err
	}
	// The child has its copies once it started: sbx's are closed whatever happened.
	defer func() {
		for _, f := range ns {
			f.Close()
		}
	}()
	cmd := exec.Command(self, append([]string{KeeperRole, n.cfg.StateDir, pasta}, pastaArgs()...)...)
	cmd.ExtraFiles = ns
	n.pastaLog = &boundedBuffer{max: maxPastaOut}
	cmd.Stdout, cmd.Stderr = n.pastaLog, n.pastaLog
	// A group of its own: a terminal's signals to sbx's group are sbx's to handle.
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true, Pdeathsig: unix.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%w: %w", ErrNoPasta, err)
	}
	n.pasta = cmd
	n.pastaDone = make(chan struct{})
	go func() { cmd.Wait(); close(n.pastaDone) }()
	return nil
}

// KeeperRole is the role argument of pasta's keeper.
const KeeperRole = "__pasta-keeper"

// KeeperMain is pasta's keeper: args are the run's state dir, pasta's path and its arguments; pasta gets
// the keeper's descriptors 0-4 (stdio, the namespaces). It records pasta's pid for gc, ends with pasta's
// status when pasta exits, and kills pasta and waits for it when it is told to end (SIGTERM, SIGINT,
// SIGHUP), its parent's death included: sbx started it with SIGTERM as its parent-death signal. A death
// of sbx before the handler is in place kills the keeper by that signal's default action, before pasta
// exists.
func KeeperMain(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "pasta keeper: usage: STATEDIR PASTA [ARG...]")
		return 2
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	cmd := exec.Command(args[1], args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{os.NewFile(3, "userns"), os.NewFile(4, "netns")}
	// Where no security module clears it, pasta's own signal covers a keeper killed by SIGKILL.
	cmd.SysProcAttr = &unix.SysProcAttr{Pdeathsig: unix.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "pasta keeper: %v\n", err)
		return 1
	}
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	pidFile := filepath.Join(args[0], pastaPidFile)
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
		fmt.Fprintf(os.Stderr, "pasta keeper: recording pasta's pid: %v\n", err)
		cmd.Process.Kill()
		<-done
		return 1
	}
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-sig:
		cmd.Process.Kill()
		<-done
		return 1
	}
}

// pastaOut is what pasta said, for an error message.
func (n *Net) pastaOut() string {
	if n.pastaLog == nil || n.pastaLog.String() == "" {
		return ""
	}
	var said []string
	for _, l := range strings.Split(n.pastaLog.String(), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.Contains(l, "to syslog") {
			said = append(said, l)
		}
	}
	return ": pasta: " + strings.Join(said, "; ")
}

// stopPasta ends pasta through its keeper and waits for both: pasta never outlives the run.
func (n *Net) stopPasta() {
	if n.pasta == nil {
		return
	}
	n.pasta.Process.Signal(unix.SIGTERM)
	<-n.pastaDone
	n.pasta = nil
	os.Remove(filepath.Join(n.cfg.StateDir, pastaPidFile))
}

// KillPasta ends the pasta of a dead run whose state dir is dir (gc). Only a process that is pasta,
// started by sbx's user, is killed.
func KillPasta(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, pastaPidFile))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(pidfd)
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	var st unix.Stat_t
	if err != nil || !strings.Contains(filepath.Base(exe), "pas") || unix.Stat("/proc/"+strconv.Itoa(pid), &st) != nil ||
		int(st.Uid) != os.Geteuid() || !strings.Contains(cmdline(pid), "--netns") {
		return
	}
	unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
}

// cmdline is a process's command line, NULs as spaces.
func cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
}

// boundedBuffer keeps the first max bytes written to it; safe for a writer and a reader at once.
type boundedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newNftConn is the contract's nftables connection: in the sandbox's namespace through its fd, or, without
// root, over the netlink socket the helper made there.
func (n *Net) newNftConn() (*nftables.Conn, error) {
	if n.nftSock >= 0 {
		return nftables.New(nftables.AsLasting(), nftables.WithTestDial(nlProxy(n.nftSock)))
	}
	return nftables.New(nftables.WithNetNSFd(n.fd), nftables.AsLasting())
}

// closeRootless releases what Attach made: pasta, the netlink socket, pasta's pid file.
func (n *Net) closeRootless() {
	n.abandonAttach()
	n.stopPasta()
	if n.nftSock >= 0 {
		unix.Close(n.nftSock)
		n.nftSock = -1
	}
}

// FilterSocket says whether a socket seen in the sandbox's namespace is the DNS filter's, which sbx
// keeps there without root (no process of the sandbox holds it): a socket on the filter's address and
// port with no owner in the sandbox.
func (n *Net) FilterSocket(address string, port int, owned bool) bool {
	return n != nil && n.rootless && !owned && port == 53 && address == dnsAddr.String()
}
