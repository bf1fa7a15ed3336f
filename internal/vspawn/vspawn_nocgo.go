//go:build !cgo

package vspawn

import "os/exec"

// Start is cmd.Start without cgo.
func Start(cmd *exec.Cmd) error { return ErrUnsupported }
