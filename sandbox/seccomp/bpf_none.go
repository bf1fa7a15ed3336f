//go:build !seccomp

package seccomp

import (
	"errors"

	"github.com/opencontainers/runc/libcontainer/configs"

	"github.com/sbx-dev/sbx/internal/supervisor"
)

// compileConfig needs runc's seccomp code, which the seccomp build tag brings in (sbx refuses to run
// without it, see cmd/sbx).
func compileConfig(*configs.Seccomp) (*supervisor.Seccomp, error) {
	return nil, errors.New("this sbx was built without seccomp support")
}
