package export

// Plain Kubernetes, Cilium and agent-sandbox types: only the fields sbx writes, with the API's field
// names. See the package comment for why not k8s.io/api.

// Meta is metav1.ObjectMeta, reduced.
type Meta struct {
	Name        string            `yaml:"name,omitempty" json:"name,omitempty"`
	Namespace   string            `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty" json:"annotations,omitempty"`
}

// Object is the envelope of every manifest.
type Object struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   Meta              `yaml:"metadata"`
	Spec       any               `yaml:"spec,omitempty"`
	Data       map[string]string `yaml:"data,omitempty"`
}

// PodSpec is core/v1 PodSpec, reduced.
type PodSpec struct {
	AutomountServiceAccountToken *bool              `yaml:"automountServiceAccountToken"`
	EnableServiceLinks           *bool              `yaml:"enableServiceLinks,omitempty"`
	RestartPolicy                string             `yaml:"restartPolicy,omitempty"`
	ActiveDeadlineSeconds        *int64             `yaml:"activeDeadlineSeconds,omitempty"`
	RuntimeClassName             string             `yaml:"runtimeClassName,omitempty"`
	SecurityContext              PodSecurityContext `yaml:"securityContext"`
	Containers                   []Container        `yaml:"containers"`
	Volumes                      []Volume           `yaml:"volumes,omitempty"`
}

// PodSecurityContext is core/v1 PodSecurityContext, reduced.
type PodSecurityContext struct {
	RunAsNonRoot   *bool           `yaml:"runAsNonRoot,omitempty"`
	RunAsUser      *int64          `yaml:"runAsUser,omitempty"`
	RunAsGroup     *int64          `yaml:"runAsGroup,omitempty"`
	SeccompProfile *SeccompProfile `yaml:"seccompProfile,omitempty"`
}

// SeccompProfile is core/v1 SeccompProfile.
type SeccompProfile struct {
	Type             string `yaml:"type"`
	LocalhostProfile string `yaml:"localhostProfile,omitempty"`
}

// Container is core/v1 Container, reduced.
type Container struct {
	Name            string          `yaml:"name"`
	Image           string          `yaml:"image"`
	Command         []string        `yaml:"command,omitempty"`
	WorkingDir      string          `yaml:"workingDir,omitempty"`
	Env             []EnvVar        `yaml:"env,omitempty"`
	Resources       Resources       `yaml:"resources"`
	SecurityContext SecurityContext `yaml:"securityContext"`
	VolumeMounts    []VolumeMount   `yaml:"volumeMounts,omitempty"`
	Stdin           bool            `yaml:"stdin,omitempty"`
}

// EnvVar is core/v1 EnvVar with a literal value.
type EnvVar struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

// Resources is core/v1 ResourceRequirements.
type Resources struct {
	Limits   map[string]string `yaml:"limits,omitempty"`
	Requests map[string]string `yaml:"requests,omitempty"`
}

// SecurityContext is core/v1 SecurityContext, reduced.
type SecurityContext struct {
	AllowPrivilegeEscalation *bool           `yaml:"allowPrivilegeEscalation"`
	Privileged               *bool           `yaml:"privileged"`
	ReadOnlyRootFilesystem   *bool           `yaml:"readOnlyRootFilesystem"`
	RunAsNonRoot             *bool           `yaml:"runAsNonRoot,omitempty"`
	Capabilities             Capabilities    `yaml:"capabilities"`
	SeccompProfile           *SeccompProfile `yaml:"seccompProfile,omitempty"`
}

// Capabilities is core/v1 Capabilities.
type Capabilities struct {
	Drop []string `yaml:"drop"`
}

// VolumeMount is core/v1 VolumeMount, reduced.
type VolumeMount struct {
	Name      string `yaml:"name"`
	MountPath string `yaml:"mountPath"`
}

// Volume is core/v1 Volume with an emptyDir source.
type Volume struct {
	Name     string   `yaml:"name"`
	EmptyDir EmptyDir `yaml:"emptyDir"`
}

// EmptyDir is core/v1 EmptyDirVolumeSource.
type EmptyDir struct {
	SizeLimit string `yaml:"sizeLimit,omitempty"`
}

// NetworkPolicySpec is networking/v1 NetworkPolicySpec.
type NetworkPolicySpec struct {
	PodSelector LabelSelector `yaml:"podSelector"`
	PolicyTypes []string      `yaml:"policyTypes"`
	Ingress     []NPRule      `yaml:"ingress,omitempty"`
	Egress      []NPRule      `yaml:"egress"`
}

// LabelSelector is metav1.LabelSelector with matchLabels.
type LabelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels,omitempty"`
}

// NPRule is networking/v1 NetworkPolicyEgressRule.
type NPRule struct {
	To    []NPPeer `yaml:"to,omitempty"`
	Ports []NPPort `yaml:"ports,omitempty"`
}

// NPPeer is networking/v1 NetworkPolicyPeer.
type NPPeer struct {
	IPBlock           *IPBlock       `yaml:"ipBlock,omitempty"`
	NamespaceSelector *LabelSelector `yaml:"namespaceSelector,omitempty"`
	PodSelector       *LabelSelector `yaml:"podSelector,omitempty"`
}

// IPBlock is networking/v1 IPBlock.
type IPBlock struct {
	CIDR   string   `yaml:"cidr"`
	Except []string `yaml:"except,omitempty"`
}

// NPPort is networking/v1 NetworkPolicyPort.
type NPPort struct {
	Protocol string `yaml:"protocol"`
	Port     int    `yaml:"port,omitempty"`
	EndPort  int    `yaml:"endPort,omitempty"`
}

// CNPSpec is cilium.io/v2 CiliumNetworkPolicy's spec (api.Rule), reduced.
type CNPSpec struct {
	EndpointSelector LabelSelector `yaml:"endpointSelector"`
	Egress           []CNPEgress   `yaml:"egress"`
	EgressDeny       []CNPEgress   `yaml:"egressDeny,omitempty"`
}

// CNPEgress is api.EgressRule / api.EgressDenyRule, reduced.
type CNPEgress struct {
	ToEndpoints []LabelSelector `yaml:"toEndpoints,omitempty"`
	ToFQDNs     []FQDN          `yaml:"toFQDNs,omitempty"`
	ToCIDRSet   []CIDRRule      `yaml:"toCIDRSet,omitempty"`
	ToPorts     []PortRule      `yaml:"toPorts,omitempty"`
}

// FQDN is api.FQDNSelector; also a DNS rule of a port rule.
type FQDN struct {
	MatchName    string `yaml:"matchName,omitempty"`
	MatchPattern string `yaml:"matchPattern,omitempty"`
}

// CIDRRule is api.CIDRRule.
type CIDRRule struct {
	CIDR   string   `yaml:"cidr"`
	Except []string `yaml:"except,omitempty"`
}

// PortRule is api.PortRule.
type PortRule struct {
	Ports []PortProtocol `yaml:"ports"`
	Rules *L7Rules       `yaml:"rules,omitempty"`
}

// PortProtocol is api.PortProtocol.
type PortProtocol struct {
	Port     string `yaml:"port"`
	EndPort  int    `yaml:"endPort,omitempty"`
	Protocol string `yaml:"protocol"`
}

// L7Rules is api.L7Rules with DNS rules only.
type L7Rules struct {
	DNS []FQDN `yaml:"dns"`
}

// SandboxTemplateSpec is agent-sandbox's extensions.agents.x-k8s.io/v1beta1 SandboxTemplateSpec, reduced.
type SandboxTemplateSpec struct {
	PodTemplate             PodTemplate `yaml:"podTemplate"`
	NetworkPolicyManagement string      `yaml:"networkPolicyManagement,omitempty"`
}

// PodTemplate is agent-sandbox's PodTemplate: metadata and a pod spec.
type PodTemplate struct {
	Metadata Meta    `yaml:"metadata,omitempty"`
	Spec     PodSpec `yaml:"spec"`
}
