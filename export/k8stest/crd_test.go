package k8stest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	crvalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/apis/core"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/sbx-dev/sbx/export"
)

var (
	sandboxTemplateGVK = schema.FromAPIVersionAndKind(export.AgentSandboxAPIVersion, "SandboxTemplate")
	ciliumGVK          = schema.GroupVersionKind{Group: "cilium.io", Version: "v2", Kind: "CiliumNetworkPolicy"}
)

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

// crdSource says where each custom resource's CRD comes from: agent-sandbox's is a CRD written by hand in
// testdata (its module is not on the Go module proxy; the file covers only what sbx writes, its pod spec
// is checked by strict decoding into k8s.io/api instead), Cilium's is read from the Cilium module this
// module requires.
var crdSource = map[schema.GroupVersionKind]func() (string, error){
	sandboxTemplateGVK: func() (string, error) {
		return filepath.Join("testdata", "crds", "sandboxtemplates.yaml"), nil
	},
	ciliumGVK: func() (string, error) {
		dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cilium/cilium").Output()
		if err != nil {
			return "", fmt.Errorf("finding the Cilium module: %w", err)
		}
		return filepath.Join(strings.TrimSpace(string(dir)), "pkg", "k8s", "apis", "cilium.io", "client", "crds", "v2", "ciliumnetworkpolicies.yaml"), nil
	},
}

// crSchema is one CRD version's schema, ready for the API server's checks.
type crSchema struct {
	structural *structuralschema.Structural
	validator  crvalidation.SchemaValidator
}

var (
	schemasMu sync.Mutex
	schemas   = map[schema.GroupVersionKind]*crSchema{}
)

// schemaFor loads the CRD of gvk once and prepares its version's schema as the API server does.
func schemaFor(gvk schema.GroupVersionKind) (*crSchema, error) {
	schemasMu.Lock()
	defer schemasMu.Unlock()
	if s, ok := schemas[gvk]; ok {
		return s, nil
	}
	path, err := crdSource[gvk]()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := sigsyaml.UnmarshalStrict(data, &crd); err != nil {
		return nil, fmt.Errorf("reading the CRD %s: %w", path, err)
	}
	if crd.Spec.Group != gvk.Group || crd.Spec.Names.Kind != gvk.Kind {
		return nil, fmt.Errorf("%s is the CRD of %s/%s, not of %s", path, crd.Spec.Group, crd.Spec.Names.Kind, gvk)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != gvk.Version {
			continue
		}
		if !v.Served || v.Schema == nil {
			return nil, fmt.Errorf("%s: version %s is not served or has no schema", path, v.Name)
		}
		var internal apiextensions.JSONSchemaProps
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
			return nil, err
		}
		st, err := structuralschema.NewStructural(&internal)
		if err != nil {
			return nil, err
		}
		val, _, err := crvalidation.NewSchemaValidator(&internal)
		if err != nil {
			return nil, err
		}
		s := &crSchema{structural: st, validator: val}
		schemas[gvk] = s
		return s, nil
	}
	return nil, fmt.Errorf("%s has no version %s", path, gvk.Version)
}

// checkCustomResource does what the API server does with a custom resource under
// --validate=strict: unknown fields (those pruning would drop) are errors, the object must match its
// CRD's OpenAPI schema, and its metadata must pass the usual checks (name a DNS-1123 subdomain, labels).
func checkCustomResource(doc []byte, gvk schema.GroupVersionKind) (map[string]any, error) {
	s, err := schemaFor(gvk)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := sigsyaml.UnmarshalStrict(doc, &obj); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	pruned := deepCopy(obj)
	unknown := pruning.PruneWithOptions(pruned, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown fields (the API server would refuse them under --validate=strict): %v", unknown)
	}
	errs := crvalidation.ValidateCustomResource(nil, obj, s.validator)
	var meta metav1.ObjectMeta
	if err := sigsyaml.UnmarshalStrict(mustJSON(obj["metadata"]), &meta); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	if meta.Namespace == "" {
		meta.Namespace = "default"
	}
	errs = append(errs, apivalidation.ValidateObjectMeta(&meta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("validation: %w", errs.ToAggregate())
	}
	return obj, nil
}

// checkSandboxTemplate checks the template as a custom resource, then its pod as the Pod that
// agent-sandbox's controller would create from it (same metadata, the template's labels).
func checkSandboxTemplate(doc []byte) error {
	obj, err := checkCustomResource(doc, sandboxTemplateGVK)
	if err != nil {
		return err
	}
	var st struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ObjectMeta `json:"metadata"`
		Spec            struct {
			PodTemplate struct {
				Metadata struct {
					Labels      map[string]string `json:"labels"`
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
				Spec corev1.PodSpec `json:"spec"`
			} `json:"podTemplate"`
			NetworkPolicyManagement string `json:"networkPolicyManagement"`
		} `json:"spec"`
	}
	if err := sigsyaml.UnmarshalStrict(mustJSON(obj), &st); err != nil {
		return fmt.Errorf("decoding the pod template strictly: %w", err)
	}
	if st.Spec.NetworkPolicyManagement != "Unmanaged" {
		return fmt.Errorf("networkPolicyManagement %q: the controller's own policy would widen sbx's egress", st.Spec.NetworkPolicyManagement)
	}
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: st.Metadata.Name, Namespace: st.Metadata.Namespace, Labels: st.Spec.PodTemplate.Metadata.Labels, Annotations: st.Spec.PodTemplate.Metadata.Annotations},
		Spec:       st.Spec.PodTemplate.Spec,
	}
	legacyscheme.Scheme.Default(pod)
	var in core.Pod
	if err := legacyscheme.Scheme.Convert(pod, &in, nil); err != nil {
		return err
	}
	if in.Namespace == "" {
		in.Namespace = "default"
	}
	if errs := validatePod(&in); len(errs) > 0 {
		return fmt.Errorf("the template's pod: %w", errs.ToAggregate())
	}
	return nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func deepCopy(m map[string]any) map[string]any {
	var out map[string]any
	if err := json.Unmarshal(mustJSON(m), &out); err != nil {
		panic(err)
	}
	return out
}

// TestSandboxTemplateSchemaBites: the hand-written CRD itself, without the Go checks after it, refuses a
// template that breaks its enum, its required fields or its set of known fields, and accepts sbx's own.
func TestSandboxTemplateSchemaBites(t *testing.T) {
	out, _, err := export.Kubernetes(compile(t, "strict", nil), export.KubeOptions{AgentSandbox: true})
	if err != nil {
		t.Fatal(err)
	}
	doc := split(t, out)[1]
	if _, err := checkCustomResource(doc, sandboxTemplateGVK); err != nil {
		t.Fatalf("sbx's template fails the schema: %v\n%s", err, doc)
	}
	for _, tt := range []struct {
		name   string
		mutate func(obj, spec, podTemplate map[string]any)
	}{
		{"enum", func(_, spec, _ map[string]any) { spec["networkPolicyManagement"] = "Unmanged" }},
		{"type", func(_, spec, _ map[string]any) { spec["networkPolicyManagement"] = 1 }},
		{"required spec", func(obj, _, _ map[string]any) { delete(obj, "spec") }},
		{"required podTemplate", func(_, spec, _ map[string]any) { delete(spec, "podTemplate") }},
		{"required pod spec", func(_, _, pt map[string]any) { delete(pt, "spec") }},
		{"unknown spec field", func(_, spec, _ map[string]any) { spec["podTemplates"] = map[string]any{} }},
		{"unknown top-level field", func(obj, _, _ map[string]any) { obj["specs"] = map[string]any{} }},
		{"label type", func(_, _, pt map[string]any) {
			pt["metadata"].(map[string]any)["labels"].(map[string]any)["n"] = 1
		}},
	} {
		var obj map[string]any
		if err := sigsyaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		spec := obj["spec"].(map[string]any)
		tt.mutate(obj, spec, spec["podTemplate"].(map[string]any))
		if _, err := checkCustomResource(mustYAML(t, obj), sandboxTemplateGVK); err == nil {
			t.Errorf("%s: accepted", tt.name)
		} else {
			t.Logf("%s: %v", tt.name, err)
		}
	}
}

func mustYAML(t *testing.T, v any) []byte {
	t.Helper()
	b, err := sigsyaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
