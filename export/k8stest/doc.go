// Package k8stest checks sbx's Kubernetes exports with Kubernetes' own code: every document is decoded
// strictly (unknown and duplicate fields refused) into the official Go types (k8s.io/api; Cilium's and
// agent-sandbox's types where a module carries them) and, after the API server's defaulting, checked
// by the validation functions the API server runs (k8s.io/kubernetes/pkg/apis/.../validation: names,
// labels, pod security fields, NetworkPolicy ipBlocks and their except lists).
//
// It is a module of its own so that k8s.io/kubernetes and its dependencies stay out of sbx's module:
// they are test-only. Run it with `make test-k8s` (or `cd export/k8stest && go test ./...`); `make test`
// does not enter it.
package k8stest
