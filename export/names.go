package export

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/sbx-dev/sbx/policy"
)

// ErrName is returned for a --name that Kubernetes would refuse as an object name.
var ErrName = errors.New("invalid object name")

// maxLabel is the length limit of a DNS-1123 label and of a label value.
const maxLabel = 63

// seccompSuffix names the ConfigMap beside the workload; names are kept short enough to take it.
const seccompSuffix = "-seccomp"

var (
	dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	notLabelChar = regexp.MustCompile(`[^a-z0-9]+`)
)

// kubeName turns a profile name (which may come from any file name, such as My_Profile.yaml) into a
// DNS-1123 label, the strictest of the name rules the exported kinds follow: lowercase letters, digits
// and '-', at most 63 characters with room for "-seccomp". A name that had to change gets a short hash
// of the original, so that two profiles never share a name or, worse, a label: NetworkPolicies add up,
// and a shared pod label would hand one profile's egress to the other's pods.
func kubeName(profile string, room int) string {
	name := strings.Trim(notLabelChar.ReplaceAllString(strings.ToLower(profile), "-"), "-")
	if name == profile && len(name) <= maxLabel-room {
		return name
	}
	sum := sha256.Sum256([]byte(profile))
	tag := hex.EncodeToString(sum[:])[:8]
	if maxLen := maxLabel - room - len(tag) - 1; len(name) > maxLen {
		name = strings.TrimRight(name[:maxLen], "-")
	}
	if name == "" {
		return "p-" + tag
	}
	return name + "-" + tag
}

// checkName refuses a caller's --name that is not a DNS-1123 label short enough for its suffix.
func checkName(name string) error {
	if !dns1123Label.MatchString(name) {
		return fmt.Errorf("%w %q: lowercase letters, digits and '-', starting and ending with a letter or digit", ErrName, name)
	}
	if len(name)+len(seccompSuffix) > maxLabel {
		return fmt.Errorf("%w %q: at most %d characters (the ConfigMap adds %q)", ErrName, name, maxLabel-len(seccompSuffix), seccompSuffix)
	}
	return nil
}

// labelValue is the value of the sbx.dev/profile label that the policies select the pod by.
func labelValue(plan *policy.Plan) string { return kubeName(plan.Profile, 0) }

// seccompFile is the ConfigMap key and the file name under the kubelet's seccomp root.
func seccompFile(plan *policy.Plan) string { return kubeName(plan.Profile, len(".json")) + ".json" }
