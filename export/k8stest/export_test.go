package k8stest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	corevalidation "k8s.io/kubernetes/pkg/apis/core/validation"
	"k8s.io/kubernetes/pkg/apis/networking"
	_ "k8s.io/kubernetes/pkg/apis/networking/install"
	netvalidation "k8s.io/kubernetes/pkg/apis/networking/validation"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/sbx-dev/sbx/export"
	"github.com/sbx-dev/sbx/policy"
)

// allows are the --allow sets every profile is exported with: none, IPv4, IPv6 (the one that once put
// ::ffff:0.0.0.0/96 into except), host names (on every port, UDP, a range), and all of them at once.
var allows = map[string][]string{
	"none":  nil,
	"ipv4":  {"0.0.0.0/0:443", "203.0.113.0/24:8443"},
	"ipv6":  {"[::/64]:443", "[::/0]:443", "[2001:db8::/32]:80"},
	"hosts": {"pypi.org:443", "*.example.com:443", "api.example.org:*", "udp:ntp.example.org:123", "git.example.org:9418-9420"},
	"all":   {"0.0.0.0/0:443", "[::/0]:443", "pypi.org:443", "udp:198.51.100.7:53"},
}

// oddNames are profile file names that are no valid Kubernetes names as they stand.
var oddNames = []string{"My_Profile", "weird name!", "ÜberStrict", "9lives", strings.Repeat("very-long-", 12) + "end", "--"}

// profiles returns every built-in profile and a copy of "contract" under each odd file name.
func profiles(t *testing.T) []string {
	t.Helper()
	out := policy.Builtins()
	dir := t.TempDir()
	src, err := policy.Load("contract")
	if err != nil {
		t.Fatal(err)
	}
	body, err := src.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// The profile's own name field would hide the file name: drop it.
	var lines []string
	for _, l := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(l, "name:") {
			lines = append(lines, l)
		}
	}
	for _, n := range oddNames {
		path := filepath.Join(dir, n+".yaml")
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		out = append(out, path)
	}
	return out
}

func compile(t *testing.T, profile string, allow []string) *policy.Plan {
	t.Helper()
	p, err := policy.Load(profile)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := policy.Compile(p, policy.CompileContext{Cwd: "/work", Overrides: policy.Overrides{Allow: allow}})
	if err != nil {
		t.Fatalf("%s with --allow %v: %v", profile, allow, err)
	}
	return plan
}

// TestExportsValidate exports every profile with every allow set, as a Pod and as a SandboxTemplate,
// and checks each document with Kubernetes' own decoding and validation.
func TestExportsValidate(t *testing.T) {
	n := 0
	for _, prof := range profiles(t) {
		for allowName, allow := range allows {
			plan := compile(t, prof, allow)
			for _, opts := range []export.KubeOptions{{}, {AgentSandbox: true, RuntimeClass: "gvisor", Namespace: "agents"}} {
				name := fmt.Sprintf("%s/%s/agent-sandbox=%v", filepath.Base(prof), allowName, opts.AgentSandbox)
				t.Run(name, func(t *testing.T) {
					out, _, err := export.Kubernetes(plan, opts)
					if err != nil {
						t.Fatal(err)
					}
					for i, doc := range split(t, out) {
						if err := check(doc); err != nil {
							t.Errorf("document %d: %v\n%s", i, err, doc)
						}
					}
				})
				n++
			}
		}
	}
	t.Logf("%d exports checked", n)
}

// split cuts a YAML stream into its documents.
func split(t *testing.T, data []byte) [][]byte {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufioReader(data))
	var out [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			out = append(out, doc)
		}
	}
}

// strict decodes YAML into the registered Go type of its apiVersion/kind, refusing unknown and
// duplicate fields, as kubectl apply --validate=strict does.
var strict = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, legacyscheme.Scheme, legacyscheme.Scheme,
	kjson.SerializerOptions{Yaml: true, Strict: true})

// check decodes one document and validates it the way the API server would on create.
func check(doc []byte) error {
	var tm metav1.TypeMeta
	if err := sigsyaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	switch tm.GroupVersionKind() {
	case schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}:
		var in core.ConfigMap
		return validate(doc, &corev1.ConfigMap{}, &in, func() field.ErrorList { return corevalidation.ValidateConfigMap(&in) })
	case schema.GroupVersionKind{Version: "v1", Kind: "Pod"}:
		var in core.Pod
		return validate(doc, &corev1.Pod{}, &in, func() field.ErrorList { return validatePod(&in) })
	case schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "NetworkPolicy"}:
		var in networking.NetworkPolicy
		return validate(doc, &networkingv1.NetworkPolicy{}, &in, func() field.ErrorList {
			return netvalidation.ValidateNetworkPolicy(&in, netvalidation.ValidationOptionsForNetworking(&in, nil))
		})
	case sandboxTemplateGVK:
		return checkSandboxTemplate(doc)
	case ciliumGVK:
		return checkCilium(doc)
	}
	return fmt.Errorf("no check for %s", tm.GroupVersionKind())
}

// validate decodes doc strictly into out (a v1 type), applies the API server's defaults, converts to
// the internal type in and runs fn, Kubernetes' validation of in.
func validate(doc []byte, out, in runtime.Object, fn func() field.ErrorList) error {
	obj, _, err := strict.Decode(doc, nil, out)
	if err != nil {
		return fmt.Errorf("strict decoding: %w", err)
	}
	legacyscheme.Scheme.Default(obj)
	if err := legacyscheme.Scheme.Convert(obj, in, nil); err != nil {
		return fmt.Errorf("converting to the internal type: %w", err)
	}
	// The API server takes the namespace from the request when the object names none.
	if m, ok := in.(metav1.Object); ok && m.GetNamespace() == "" {
		m.SetNamespace("default")
	}
	if errs := fn(); len(errs) > 0 {
		return fmt.Errorf("validation: %w", errs.ToAggregate())
	}
	return nil
}

// validatePod runs the API server's checks for a new pod.
func validatePod(p *core.Pod) field.ErrorList {
	return corevalidation.ValidatePodCreate(p, corevalidation.PodValidationOptions{})
}

// TestChecksBite: each check refuses a document broken in the way it guards against, so that passing
// means something: an unknown field (strict decoding, and pruning for custom resources), an invalid
// name, an except outside its block, a Cilium port out of range.
func TestChecksBite(t *testing.T) {
	out, _, err := export.Kubernetes(compile(t, "python-build", []string{"[::/0]:443"}), export.KubeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := export.Kubernetes(compile(t, "strict", nil), export.KubeOptions{AgentSandbox: true})
	if err != nil {
		t.Fatal(err)
	}
	docs, stDocs := split(t, out), split(t, st)
	for _, tt := range []struct {
		name     string
		doc      []byte
		old, new string
	}{
		{"pod unknown field", docs[1], "automountServiceAccountToken:", "automountServiceAcountToken:"},
		{"pod name", docs[1], "name: sbx-python-build\n", "name: sbx_python_build\n"},
		{"configmap name", docs[0], "name: sbx-python-build-seccomp", "name: Sbx-python-build-seccomp"},
		{"except outside the block", docs[2], "- fc00::/7", "- 10.0.0.0/8"},
		{"template unknown field", stDocs[1], "networkPolicyManagement:", "networkPolicyManagment:"},
		{"template pod field", stDocs[1], "restartPolicy: Never", "restartPolicy: Sometimes"},
		{"template pod unknown field", stDocs[1], "enableServiceLinks:", "enableServiceLink:"},
		{"template metadata unknown field", stDocs[1], "    metadata:\n      labels:", "    metadata:\n      label:"},
		{"cilium port", docs[3], "port: \"443\"", "port: \"70000\""},
		{"cilium unknown field", docs[3], "toFQDNs:", "toFQDN:"},
	} {
		if !bytes.Contains(tt.doc, []byte(tt.old)) {
			t.Fatalf("%s: the document has no %q:\n%s", tt.name, tt.old, tt.doc)
		}
		if err := check(tt.doc); err != nil {
			t.Fatalf("%s: the unchanged document fails: %v", tt.name, err)
		}
		if err := check(bytes.Replace(tt.doc, []byte(tt.old), []byte(tt.new), 1)); err == nil {
			t.Errorf("%s: accepted", tt.name)
		} else {
			t.Logf("%s: %v", tt.name, err)
		}
	}
}
