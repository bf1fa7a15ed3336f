// Package profiles holds sbx's built-in profiles as YAML files embedded into the binary. It only stores
// them: package policy parses, resolves and validates them (policy.Load("default")).
package profiles

import (
	"embed"
	"io/fs"
	"slices"
	"strings"
)

//go:embed *.yaml
var files embed.FS

// FS returns the built-in profiles, one NAME.yaml file each at the root.
func FS() fs.FS { return files }

// Names returns the names of the built-in profiles, sorted.
func Names() []string {
	entries, _ := fs.ReadDir(files, ".")
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}
