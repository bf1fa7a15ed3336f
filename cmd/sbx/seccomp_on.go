//go:build seccomp

package main

import (
	"fmt"

	libseccomp "github.com/seccomp/libseccomp-golang"
)

// seccompBuilt: this binary can apply seccomp filters (built with -tags seccomp).
const seccompBuilt = true

func libseccompVersion() string {
	major, minor, micro := libseccomp.GetLibraryVersion()
	return fmt.Sprintf("%d.%d.%d", major, minor, micro)
}
