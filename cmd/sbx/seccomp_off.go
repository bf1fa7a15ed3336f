//go:build !seccomp

package main

// seccompBuilt: this binary was built without -tags seccomp, so libcontainer cannot apply the seccomp
// filter every profile has; runs are refused up front (checkBuild) instead of failing mid-setup.
const seccompBuilt = false

func libseccompVersion() string { return "not built in (build with -tags seccomp)" }
