package policy

import (
	"bytes"

	"go.yaml.in/yaml/v3"
)

// Marshal writes the profile as YAML that Parse reads back to the same profile: fields in schema
// order, unset fields left out, sizes and durations in their shortest exact form, network entries as
// DEST strings. sbx profile show prints a resolved profile this way, and Plan.Hash is its sha256.
func (p *Profile) Marshal() ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(p); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
