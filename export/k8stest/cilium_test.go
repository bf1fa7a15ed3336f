package k8stest

import (
	"fmt"
	"io"
	"log/slog"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	sigsyaml "sigs.k8s.io/yaml"
)

// checkCilium checks a CiliumNetworkPolicy against Cilium's CRD as the API server would, then decodes it
// strictly into Cilium's Go type and parses it as the Cilium agent does (rule sanitizing: selectors,
// toFQDNs patterns, port ranges, L7 DNS rules, CIDR sets).
func checkCilium(doc []byte) error {
	if _, err := checkCustomResource(doc, ciliumGVK); err != nil {
		return err
	}
	var cnp ciliumv2.CiliumNetworkPolicy
	if err := sigsyaml.UnmarshalStrict(doc, &cnp); err != nil {
		return fmt.Errorf("strict decoding into Cilium's type: %w", err)
	}
	if cnp.Namespace == "" {
		cnp.Namespace = "default"
	}
	if _, err := cnp.Parse(slog.New(slog.NewTextHandler(io.Discard, nil)), "default"); err != nil {
		return fmt.Errorf("the Cilium agent's parse: %w", err)
	}
	return nil
}
