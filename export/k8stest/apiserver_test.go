package k8stest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/export"
)

// Environment of TestDryRunOnAPIServer, set by make test-k8s KUBE_DRYRUN=1 after it built the binaries.
const (
	envAPIServer = "KUBE_APISERVER" // path of kube-apiserver
	envKubectl   = "KUBECTL"        // path of kubectl
	envEtcd      = "ETCD"           // path of etcd (default: etcd on PATH, Debian's etcd-server)
)

// TestDryRunOnAPIServer runs a real kube-apiserver (with etcd, both on loopback only), installs Cilium's
// CRD and the SandboxTemplate CRD written by hand in testdata, makes the namespaces enforce PodSecurity "restricted", and applies every
// export with kubectl apply --dry-run=server --validate=strict: the API server's own decoding, defaulting,
// admission and validation, nothing stored.
func TestDryRunOnAPIServer(t *testing.T) {
	apiserver, kubectl := os.Getenv(envAPIServer), os.Getenv(envKubectl)
	if apiserver == "" || kubectl == "" {
		t.Skipf("%s and %s are not set: make test-k8s KUBE_DRYRUN=1 builds kube-apiserver and kubectl and sets them", envAPIServer, envKubectl)
	}
	etcd := os.Getenv(envEtcd)
	if etcd == "" {
		var err error
		if etcd, err = exec.LookPath("etcd"); err != nil {
			t.Skip("no etcd on PATH (Debian package etcd-server)")
		}
	}
	dir := t.TempDir()
	etcdURL := startEtcd(t, etcd, dir)
	kubeconfig := startAPIServer(t, apiserver, etcdURL, dir)
	k := func(args ...string) ([]byte, error) {
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		return cmd.CombinedOutput()
	}
	waitFor(t, "kube-apiserver /readyz", 90*time.Second, func() error {
		_, err := k("get", "--raw", "/readyz")
		return err
	})
	cilium, err := crdSource[ciliumGVK]()
	if err != nil {
		t.Fatal(err)
	}
	sandbox, _ := crdSource[sandboxTemplateGVK]()
	for _, args := range [][]string{
		{"apply", "-f", cilium, "-f", sandbox},
		{"wait", "--for", "condition=established", "--timeout=60s", "crd/ciliumnetworkpolicies.cilium.io", "crd/sandboxtemplates.extensions.agents.x-k8s.io"},
		{"create", "namespace", "agents"},
		// No controller manager runs: create the service account that pod admission looks up.
		{"create", "serviceaccount", "default", "--namespace", "default"},
		{"label", "--overwrite", "namespace", "default", "agents", "pod-security.kubernetes.io/enforce=restricted"},
	} {
		if out, err := k(args...); err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	n := 0
	for _, prof := range profiles(t) {
		for allowName, allow := range allows {
			plan := compile(t, prof, allow)
			for _, opts := range []export.KubeOptions{{}, {AgentSandbox: true, RuntimeClass: "gvisor", Namespace: "agents"}} {
				out, _, err := export.Kubernetes(plan, opts)
				if err != nil {
					t.Fatal(err)
				}
				file := filepath.Join(dir, fmt.Sprintf("export-%d.yaml", n))
				if err := os.WriteFile(file, out, 0o644); err != nil {
					t.Fatal(err)
				}
				if res, err := k("apply", "--dry-run=server", "--validate=strict", "-f", file); err != nil {
					t.Errorf("%s --allow %s (agent-sandbox %v): %v\n%s", filepath.Base(prof), allowName, opts.AgentSandbox, err, res)
				} else if bytes.Contains(res, []byte("Warning")) {
					t.Errorf("%s --allow %s (agent-sandbox %v): warnings\n%s", filepath.Base(prof), allowName, opts.AgentSandbox, res)
				}
				n++
			}
		}
	}
	t.Logf("%d exports applied with --dry-run=server --validate=strict", n)
}

// freePort returns a loopback port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startProcess starts cmd with its output in dir/name.log and ends it (by its pid) when the test ends.
func startProcess(t *testing.T, dir, name string, cmd *exec.Cmd) {
	t.Helper()
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
		if t.Failed() {
			tail, _ := os.ReadFile(log.Name())
			if len(tail) > 4000 {
				tail = tail[len(tail)-4000:]
			}
			t.Logf("%s log (end):\n%s", name, tail)
		}
	})
}

func startEtcd(t *testing.T, etcd, dir string) string {
	client, peer := freePort(t), freePort(t)
	clientURL := "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	startProcess(t, dir, "etcd", exec.Command(etcd, "--name", "sbx-test", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL, "--initial-cluster", "sbx-test="+peerURL))
	return clientURL
}

// startAPIServer runs kube-apiserver on loopback with a static token for kubectl and every request
// authorized, and returns the path of a kubeconfig for it.
func startAPIServer(t *testing.T, apiserver, etcdURL, dir string) string {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "sa.key")
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	tokenFile := filepath.Join(dir, "tokens.csv")
	const token = "sbx-test-token"
	for file, data := range map[string][]byte{keyFile: pemKey, tokenFile: []byte(token + ",admin,admin,system:masters\n")} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t)
	startProcess(t, dir, "kube-apiserver", exec.Command(apiserver,
		"--etcd-servers", etcdURL, "--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(port),
		"--advertise-address", "127.0.0.1", "--endpoint-reconciler-type", "none", "--cert-dir", filepath.Join(dir, "certs"),
		"--service-account-issuer", "https://kubernetes.default.svc", "--service-account-key-file", keyFile,
		"--service-account-signing-key-file", keyFile, "--token-auth-file", tokenFile,
		"--authorization-mode", "AlwaysAllow", "--service-cluster-ip-range", "10.96.0.0/24"))
	kubeconfig := filepath.Join(dir, "kubeconfig")
	conf := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: t, cluster: {server: "https://127.0.0.1:%d", insecure-skip-tls-verify: true}}]
users: [{name: t, user: {token: %s}}]
contexts: [{name: t, context: {cluster: t, user: t, namespace: default}}]
current-context: t
`, port, token)
	if err := os.WriteFile(kubeconfig, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

func waitFor(t *testing.T, what string, limit time.Duration, ok func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		err := ok()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
