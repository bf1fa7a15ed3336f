package export

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sbx-dev/sbx/policy"
)

// Defaults of KubeOptions.
const (
	DefaultImage    = "debian:12-slim"
	DefaultUID      = 65532 // the "nonroot" user of distroless images
	SeccompDir      = "sbx" // localhostProfile is SeccompDir/<profile>.json under the kubelet's seccomp root
	profileLabel    = "sbx.dev/profile"
	sandboxLabelKey = "app.kubernetes.io/managed-by"
)

// AgentSandboxAPIVersion is the SandboxTemplate version written: kubernetes-sigs/agent-sandbox's storage
// version (its CRD marks v1alpha1 deprecated).
const AgentSandboxAPIVersion = "extensions.agents.x-k8s.io/v1beta1"

// KubeOptions are the choices a profile does not make.
type KubeOptions struct {
	Name         string   // object names; default "sbx-<profile>"
	Namespace    string   // "" = none written
	Image        string   // container image; default DefaultImage
	Command      []string // container command; default: the image's
	AgentSandbox bool     // a SandboxTemplate (kubernetes-sigs/agent-sandbox) instead of a Pod
	RuntimeClass string   // runtimeClassName, e.g. gvisor or kata; "" = the cluster's default
}

// Kubernetes returns the manifests for plan as one multi-document YAML stream: a ConfigMap with the
// seccomp profile, the Pod (or SandboxTemplate), a NetworkPolicy and, when the profile allows host
// names, a CiliumNetworkPolicy. The Fidelity says what was translated and what could not be.
func Kubernetes(plan *policy.Plan, o KubeOptions) ([]byte, Fidelity, error) {
	if o.Name == "" {
		o.Name = "sbx-" + kubeName(plan.Profile, len("sbx-")+len(seccompSuffix))
	} else if err := checkName(o.Name); err != nil {
		return nil, nil, err
	}
	if o.Image == "" {
		o.Image = DefaultImage
	}
	var f Fidelity
	seccompJSON, err := seccompProfile(plan, &f)
	if err != nil {
		return nil, nil, err
	}
	objs := []Object{
		{APIVersion: "v1", Kind: "ConfigMap", Metadata: meta(plan, o, o.Name+seccompSuffix),
			Data: map[string]string{seccompFile(plan): seccompJSON}},
		workload(plan, o, &f),
		{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy", Metadata: meta(plan, o, o.Name),
			Spec: networkPolicy(plan, &f)},
	}
	if cnp := ciliumPolicy(plan, &f); cnp != nil {
		objs = append(objs, Object{APIVersion: "cilium.io/v2", Kind: "CiliumNetworkPolicy",
			Metadata: meta(plan, o, o.Name), Spec: cnp})
	}
	notExpressible(plan, &f)
	out, err := encode(objs)
	return out, f, err
}

func meta(plan *policy.Plan, o KubeOptions, name string) Meta {
	return Meta{Name: name, Namespace: o.Namespace,
		Labels:      map[string]string{profileLabel: labelValue(plan), sandboxLabelKey: "sbx"},
		Annotations: map[string]string{"org.sbx.profile": plan.Profile, "org.sbx.profile.sha256": plan.Hash()}}
}

func encode(objs []Object) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	for _, o := range objs {
		if err := enc.Encode(o); err != nil {
			return nil, fmt.Errorf("writing %s: %w", o.Kind, err)
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func seccompProfile(plan *policy.Plan, f *Fidelity) (string, error) {
	if plan.Seccomp == nil {
		f.add("syscalls", NotExpressible, "the profile has no seccomp filter; the pod gets RuntimeDefault")
		return "{}", nil
	}
	data, err := json.MarshalIndent(plan.Seccomp, "", "  ")
	if err != nil {
		return "", fmt.Errorf("writing the seccomp profile: %w", err)
	}
	f.add("syscalls", Translated, "Localhost seccomp profile %s/%s (%d rules); install the ConfigMap's file under "+
		"/var/lib/kubelet/seccomp/%s/ on every node, or with the Security Profiles Operator",
		SeccompDir, seccompFile(plan), len(plan.Seccomp.Syscalls), SeccompDir)
	return string(data), nil
}

func ptr[T any](v T) *T { return &v }

func workload(plan *policy.Plan, o KubeOptions, f *Fidelity) Object {
	spec := podSpec(plan, o, f)
	if !o.AgentSandbox {
		return Object{APIVersion: "v1", Kind: "Pod", Metadata: meta(plan, o, o.Name), Spec: spec}
	}
	m := meta(plan, o, "")
	// Unmanaged: with the default (Managed) and no networkPolicy of its own, agent-sandbox's controller adds
	// a policy that allows the public internet, and NetworkPolicies add up: it would widen sbx's contract.
	// The NetworkPolicy (and CiliumNetworkPolicy) written beside the template select its pods by label.
	return Object{APIVersion: AgentSandboxAPIVersion, Kind: "SandboxTemplate", Metadata: meta(plan, o, o.Name),
		Spec: SandboxTemplateSpec{PodTemplate: PodTemplate{Metadata: Meta{Labels: m.Labels, Annotations: m.Annotations}, Spec: spec},
			NetworkPolicyManagement: "Unmanaged"}}
}

func podSpec(plan *policy.Plan, o KubeOptions, f *Fidelity) PodSpec {
	uid, gid := int64(plan.UID), int64(plan.GID)
	if uid == 0 {
		uid, gid = DefaultUID, DefaultUID
		f.add("user", Partial, "uid 0 inside sbx's sandbox becomes runAsUser %d with runAsNonRoot (a pod cannot be root-in-a-user-namespace portably)", DefaultUID)
	} else {
		f.add("user", Translated, "runAsUser %d, runAsGroup %d, runAsNonRoot", uid, gid)
	}
	sp := &SeccompProfile{Type: "Localhost", LocalhostProfile: SeccompDir + "/" + seccompFile(plan)}
	if plan.Seccomp == nil {
		sp = &SeccompProfile{Type: "RuntimeDefault"}
	}
	c := Container{
		Name: "sandbox", Image: o.Image, Command: o.Command, WorkingDir: "/tmp",
		Env:       env(plan),
		Resources: resources(plan, f),
		SecurityContext: SecurityContext{
			AllowPrivilegeEscalation: ptr(false), Privileged: ptr(false), ReadOnlyRootFilesystem: ptr(true),
			RunAsNonRoot: ptr(true), Capabilities: Capabilities{Drop: []string{"ALL"}}, SeccompProfile: sp,
		},
	}
	f.add("privileges", Translated, "allowPrivilegeEscalation false (no_new_privs), all capabilities dropped, not privileged, no service-account token")
	spec := PodSpec{
		AutomountServiceAccountToken: ptr(false), EnableServiceLinks: ptr(false), RestartPolicy: "Never",
		RuntimeClassName: o.RuntimeClass,
		SecurityContext:  PodSecurityContext{RunAsNonRoot: ptr(true), RunAsUser: &uid, RunAsGroup: &gid, SeccompProfile: sp},
	}
	spec.Volumes, c.VolumeMounts = writable(plan, f)
	spec.Containers = []Container{c}
	if plan.Timeout > 0 {
		spec.ActiveDeadlineSeconds = ptr(int64((plan.Timeout + 999_999_999) / 1_000_000_000))
		f.add("limits.timeout", Translated, "activeDeadlineSeconds %d", *spec.ActiveDeadlineSeconds)
	}
	return spec
}

// env writes the plan's environment; a plan compiled for export holds only fixed values.
func env(plan *policy.Plan) []EnvVar {
	var out []EnvVar
	for _, kv := range plan.Env {
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, EnvVar{Name: k, Value: v})
	}
	return out
}

func resources(plan *policy.Plan, f *Fidelity) Resources {
	l := plan.Limits
	r := Resources{Limits: map[string]string{}, Requests: map[string]string{}}
	if l.MemoryBytes > 0 {
		r.Limits["memory"] = quantity(l.MemoryBytes)
		f.add("limits.memory", Translated, "resources.limits.memory %s", r.Limits["memory"])
	}
	if l.CPUs > 0 {
		r.Limits["cpu"] = strconv.FormatInt(int64(l.CPUs*1000), 10) + "m"
		f.add("limits.cpu", Translated, "resources.limits.cpu %s", r.Limits["cpu"])
	}
	if l.DiskBytes > 0 {
		r.Limits["ephemeral-storage"] = quantity(l.DiskBytes)
		f.add("limits.disk", Translated, "resources.limits.ephemeral-storage %s", r.Limits["ephemeral-storage"])
	}
	if l.Pids > 0 {
		f.add("limits.pids", NotExpressible, "no per-pod field; the node's kubelet sets podPidsLimit (%d here)", l.Pids)
	}
	if l.NoFile > 0 {
		f.add("limits.nofile", NotExpressible, "no pod field for RLIMIT_NOFILE (%d here); the runtime's default applies", l.NoFile)
	}
	for k, v := range r.Limits {
		r.Requests[k] = v
	}
	return r
}

// quantity writes bytes as a Kubernetes quantity, in Mi or Gi when exact.
func quantity(b int64) string {
	switch {
	case b%(1<<30) == 0:
		return strconv.FormatInt(b>>30, 10) + "Gi"
	case b%(1<<20) == 0:
		return strconv.FormatInt(b>>20, 10) + "Mi"
	}
	return strconv.FormatInt(b, 10)
}

// writable mounts an emptyDir at each writable path: the root filesystem is read-only, as the host's
// files are to the command under sbx.
func writable(plan *policy.Plan, f *Fidelity) ([]Volume, []VolumeMount) {
	var vols []Volume
	var mounts []VolumeMount
	for i, p := range plan.Filesystem.Write {
		name := fmt.Sprintf("write-%d", i)
		vols = append(vols, Volume{Name: name, EmptyDir: EmptyDir{}})
		mounts = append(mounts, VolumeMount{Name: name, MountPath: p})
	}
	f.add("filesystem.write", Partial, "readOnlyRootFilesystem with an emptyDir at %s; the working directory is not writable in the pod",
		strings.Join(plan.Filesystem.Write, ", "))
	return vols, mounts
}

// exceptions are the plan's exact exceptions to the always-denied ranges.
func exceptions(plan *policy.Plan) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range plan.Network.Except {
		if d, err := r.Dest(); err == nil && !d.IsHost() {
			out = append(out, d.Prefix)
		}
	}
	return out
}
