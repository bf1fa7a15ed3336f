package export

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"go.yaml.in/yaml/v3"

	"github.com/sbx-dev/sbx/policy"
)

// schemaFor maps apiVersion/kind to the schema file in testdata/schemas.
var schemaFor = map[string]string{
	"v1/Pod":                                    "pod-v1.json",
	"v1/ConfigMap":                              "configmap-v1.json",
	"networking.k8s.io/v1/NetworkPolicy":        "networkpolicy-networking-v1.json",
	"cilium.io/v2/CiliumNetworkPolicy":          "ciliumnetworkpolicy-cilium-v2.json",
	AgentSandboxAPIVersion + "/SandboxTemplate": "sandboxtemplate-extensions-v1beta1.json",
}

func compile(t *testing.T, name string, allow ...string) *policy.Plan {
	t.Helper()
	p, err := policy.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := policy.Compile(p, policy.CompileContext{Cwd: "/work", Overrides: policy.Overrides{Allow: allow}})
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// docs splits a YAML stream into JSON-shaped documents.
func docs(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		// through JSON, so that numbers and maps look as a schema validator expects
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
}

func validate(t *testing.T, doc map[string]any) {
	t.Helper()
	if err := validateErr(t, doc); err != nil {
		t.Error(err)
	}
}

func validateErr(t *testing.T, doc map[string]any) error {
	t.Helper()
	key := doc["apiVersion"].(string) + "/" + doc["kind"].(string)
	file, ok := schemaFor[key]
	if !ok {
		t.Fatalf("no schema for %s", key)
	}
	data, err := os.ReadFile(filepath.Join("testdata", "schemas", file))
	if err != nil {
		t.Fatal(err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Validate(doc); err != nil {
		return fmt.Errorf("%s does not validate against %s: %v", key, file, err)
	}
	return nil
}

// TestSchemasBite: the schemas reject a misspelt field and a wrong enum, so that passing means something.
func TestSchemasBite(t *testing.T) {
	out, _, err := Kubernetes(compile(t, "python-build"), KubeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func([]map[string]any){
		"pod typo": func(ds []map[string]any) {
			ds[1]["spec"].(map[string]any)["automountServiceAcountToken"] = false
		},
		"seccomp type": func(ds []map[string]any) {
			ds[1]["spec"].(map[string]any)["securityContext"].(map[string]any)["seccompProfile"] = map[string]any{"type": "localhost"}
		},
		"cilium protocol": func(ds []map[string]any) {
			ds[3]["spec"].(map[string]any)["egress"].([]any)[1].(map[string]any)["toPorts"] = []any{map[string]any{"ports": []any{map[string]any{"port": "443", "protocol": "tcp"}}}}
		},
	} {
		ds := docs(t, out)
		mutate(ds)
		bad := 0
		for _, d := range ds {
			if validateErr(t, d) != nil {
				bad++
			}
		}
		if bad != 1 {
			t.Errorf("%s: %d documents fail validation, want 1", name, bad)
		}
	}
}

func kinds(ds []map[string]any) string {
	var k []string
	for _, d := range ds {
		k = append(k, d["kind"].(string))
	}
	return strings.Join(k, ",")
}

// TestKubernetes: every document validates against its schema, the expected objects are there, and
// the fidelity report names what does not carry over.
func TestKubernetes(t *testing.T) {
	tests := []struct {
		name      string
		plan      *policy.Plan
		opts      KubeOptions
		wantKinds string
		want      map[string]string // fidelity feature → status
	}{
		{"default", compile(t, "default"), KubeOptions{}, "ConfigMap,Pod,NetworkPolicy",
			map[string]string{"filesystem.landlock": NotExpressible, "expect": NotExpressible, "limits.pids": NotExpressible,
				"network.mode": Translated, "syscalls": Translated, "limits.memory": Translated}},
		{"hosts", compile(t, "python-build"), KubeOptions{}, "ConfigMap,Pod,NetworkPolicy,CiliumNetworkPolicy",
			map[string]string{"filesystem.landlock": NotExpressible, "network.dns": Partial, "network.allow tcp:pypi.org:443": Translated,
				"network.metadata": Translated}},
		{"wildcard", compile(t, "contract", "*.example.com:443", "api.example.com:443"), KubeOptions{}, "ConfigMap,Pod,NetworkPolicy,CiliumNetworkPolicy",
			map[string]string{"network.allow tcp:*.example.com:443": Partial, "network.allow tcp:api.example.com:443": Translated}},
		{"cidr", compile(t, "contract", "0.0.0.0/0:443", "10.1.2.3:5432"), KubeOptions{}, "ConfigMap,Pod,NetworkPolicy",
			map[string]string{"network.allow tcp:0.0.0.0/0:443": Translated, "network.allow tcp:10.1.2.3:5432": NotExpressible}},
		{"agent-sandbox", compile(t, "strict"), KubeOptions{AgentSandbox: true, RuntimeClass: "gvisor"}, "ConfigMap,SandboxTemplate,NetworkPolicy",
			map[string]string{"limits.timeout": Translated, "filesystem.landlock": NotExpressible}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, fid, err := Kubernetes(tt.plan, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			ds := docs(t, out)
			if got := kinds(ds); got != tt.wantKinds {
				t.Errorf("kinds %s, want %s", got, tt.wantKinds)
			}
			for _, d := range ds {
				validate(t, d)
			}
			for feature, status := range tt.want {
				if got := fid.Status(feature); got != status {
					t.Errorf("fidelity %s: %q, want %q", feature, got, status)
				}
			}
		})
	}
}

// TestKubernetesContent checks the security-relevant values, not only their shape.
func TestKubernetesContent(t *testing.T) {
	out, _, err := Kubernetes(compile(t, "python-build"), KubeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds := docs(t, out)
	pod, np, cnp := ds[1], ds[2], ds[3]
	for path, want := range map[string]string{
		"spec.automountServiceAccountToken":                          "false",
		"spec.securityContext.runAsNonRoot":                          "true",
		"spec.securityContext.seccompProfile.type":                   `"Localhost"`,
		"spec.securityContext.seccompProfile.localhostProfile":       `"sbx/python-build.json"`,
		"spec.containers.0.securityContext.allowPrivilegeEscalation": "false",
		"spec.containers.0.securityContext.capabilities.drop":        `["ALL"]`,
		"spec.containers.0.resources.limits.memory":                  `"2Gi"`,
	} {
		if got := at(pod, path); got != want {
			t.Errorf("pod %s = %s, want %s", path, got, want)
		}
	}
	if got := at(np, "spec.egress"); !strings.Contains(got, `"k8s-app":"kube-dns"`) {
		t.Errorf("NetworkPolicy egress %s lets no DNS through", got)
	}
	for _, want := range []string{`"matchName":"pypi.org"`, `"port":"443"`, `"169.254.169.254/32"`, `"dns":[`} {
		if got := at(cnp, "spec"); !strings.Contains(got, want) {
			t.Errorf("CiliumNetworkPolicy spec lacks %s: %s", want, got)
		}
	}
	// always-denied ranges are cut out of a wide allow
	out, _, _ = Kubernetes(compile(t, "contract", "0.0.0.0/0:443"), KubeOptions{})
	if got := at(docs(t, out)[2], "spec.egress.0.to.0.ipBlock.except"); !strings.Contains(got, "169.254.169.254/32") || !strings.Contains(got, "10.0.0.0/8") {
		t.Errorf("except = %s, want the metadata address and RFC 1918", got)
	}
}

func at(doc map[string]any, path string) string {
	var v any = doc
	for _, k := range strings.Split(path, ".") {
		switch n := v.(type) {
		case map[string]any:
			v = n[k]
		case []any:
			i := int(k[0] - '0')
			if i >= len(n) {
				return "<missing>"
			}
			v = n[i]
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// TestNetworkPolicyIngress: the NetworkPolicy denies every inbound connection but network.ingress ports.
func TestNetworkPolicyIngress(t *testing.T) {
	plan := &policy.Plan{Profile: "p", Network: policy.Network{Mode: policy.NetContract,
		Ingress: []policy.Listener{{Proto: "tcp", Port: 8080}}}}
	spec := networkPolicy(plan, &Fidelity{})
	if len(spec.Ingress) != 1 || len(spec.Ingress[0].Ports) != 1 || spec.Ingress[0].Ports[0] != (NPPort{Protocol: "TCP", Port: 8080}) {
		t.Errorf("ingress = %+v, want one rule for TCP 8080", spec.Ingress)
	}
	plan.Network.Ingress = nil
	if spec := networkPolicy(plan, &Fidelity{}); len(spec.Ingress) != 0 || spec.PolicyTypes[0] != "Ingress" {
		t.Errorf("without network.ingress: %+v, want no ingress rule under policyTypes Ingress", spec)
	}
}

// TestKubeName: any profile name becomes a DNS-1123 label with room for its suffix; a name that had to
// change carries a hash of the original, so two profiles never share a name or a pod label.
func TestKubeName(t *testing.T) {
	for _, tt := range []struct{ profile, want string }{
		{"python-build", "python-build"},
		{"My_Profile", "my-profile-"},
		{"my-profile", "my-profile"},
		{"__", "p-"},
		{strings.Repeat("a", 80), "aaaa"},
		{"ünïcode.prof", "n-code-prof-"},
	} {
		got := kubeName(tt.profile, len("sbx-")+len(seccompSuffix))
		if !strings.HasPrefix(got, tt.want) || checkName("sbx-"+got) != nil {
			t.Errorf("kubeName(%q) = %q, want a valid label starting %q (%v)", tt.profile, got, tt.want, checkName("sbx-"+got))
		}
	}
	if kubeName("My_Profile", 0) == kubeName("my-profile", 0) {
		t.Error("My_Profile and my-profile share a label")
	}
	if err := checkName("Bad_Name"); !errors.Is(err, ErrName) {
		t.Errorf("checkName(Bad_Name) = %v, want ErrName", err)
	}
}

// TestExceptFamilies: an ipBlock's except holds only strict subsets of the block's own family, never
// the IPv4-mapped range (the API server reads it as IPv4 and refuses the policy).
func TestExceptFamilies(t *testing.T) {
	for _, tt := range []struct {
		allow string
		want  []string
		not   []string
	}{
		{"[::/64]:443", []string{"::1/128"}, []string{"::ffff:0.0.0.0/96", "::/64"}},
		{"[::/0]:443", []string{"fc00::/7", "fd00:ec2::254/128"}, []string{"::ffff:0.0.0.0/96", "10.0.0.0/8"}},
		{"0.0.0.0/0:443", []string{"10.0.0.0/8"}, []string{"fc00::/7", "::ffff:0.0.0.0/96"}},
		{"10.0.0.0/8:443", nil, []string{"10.0.0.0/8"}},
	} {
		out, _, err := Kubernetes(compile(t, "contract", tt.allow), KubeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		except := at(docs(t, out)[2], "spec.egress.0.to.0.ipBlock.except")
		for _, w := range tt.want {
			if !strings.Contains(except, `"`+w+`"`) {
				t.Errorf("--allow %s: except %s lacks %s", tt.allow, except, w)
			}
		}
		for _, n := range tt.not {
			if strings.Contains(except, `"`+n+`"`) {
				t.Errorf("--allow %s: except %s holds %s", tt.allow, except, n)
			}
		}
	}
}

// TestCiliumPorts: a host rule lets through its protocol (TCP and UDP when it names none) on its ports,
// every port for port 0; never every protocol, which a rule without toPorts would.
func TestCiliumPorts(t *testing.T) {
	for _, tc := range []struct {
		rule policy.NetRule
		want []PortProtocol
	}{
		{policy.NetRule{Host: "a.test"}, []PortProtocol{{Port: "0", Protocol: "TCP"}, {Port: "0", Protocol: "UDP"}}},
		{policy.NetRule{Host: "a.test", Proto: "tcp", Port: 443}, []PortProtocol{{Port: "443", Protocol: "TCP"}}},
		{policy.NetRule{Host: "a.test", Proto: "udp", Port: 8000, PortEnd: 8100}, []PortProtocol{{Port: "8000", EndPort: 8100, Protocol: "UDP"}}},
	} {
		got := ciliumPorts(tc.rule)
		if len(got) != 1 || !slices.Equal(got[0].Ports, tc.want) {
			t.Errorf("ciliumPorts(%+v) = %+v, want ports %+v", tc.rule, got, tc.want)
		}
	}
	out, _, err := Kubernetes(compile(t, "contract", "api.test:*"), KubeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := at(docs(t, out)[3], "spec.egress.1"); !strings.Contains(got, `"matchName":"api.test"`) || !strings.Contains(got, `"port":"0"`) {
		t.Errorf("the egress of api.test on every port = %s, want toFQDNs with toPorts of port 0", got)
	}
}
