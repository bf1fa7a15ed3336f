package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Exit statuses the shim uses for failures of its own, as a shell would.
const (
	ExitSetup         = 125 // sbx could not set up the sandbox (Landlock could not be applied, ...)
	ExitNotExecutable = 126
	ExitNotFound      = 127
)

// shimEnv carries the shim's configuration; the shim removes it before execve.
const shimEnv = "_SBX_SHIM"

// shimConfig is what the shim applies before it runs the command.
type shimConfig struct {
	Read    []string `json:"read"`
	Write   []string `json:"write"`
	Degrade bool     `json:"degrade"` // go on without Landlock when it cannot be applied
}

// shimMain runs inside the sandbox as the command's process: it resolves the command, restricts itself
// with Landlock, and execs the command in place, so that the command keeps the pid sbx waits for.
func shimMain(args []string) int {
	if len(args) == 0 {
		return shimFail(ExitSetup, "shim: no command", "")
	}
	var cfg shimConfig
	if err := json.Unmarshal([]byte(os.Getenv(shimEnv)), &cfg); err != nil {
		return shimFail(ExitSetup, "shim: bad configuration: "+err.Error(), "")
	}
	os.Unsetenv(shimEnv)
	path, code, err := resolveCommand(args[0])
	if err != nil {
		return shimFail(code, err.Error(), commandHint(code, args[0]))
	}
	if err := applyLandlock(cfg); err != nil {
		if !cfg.Degrade {
			return shimFail(ExitSetup, err.Error(),
				"the profile requires Landlock; set filesystem.landlock: degrade to run without it")
		}
		fmt.Fprintf(os.Stderr, "sbx: warning: running without Landlock: %v\n", err)
	}
	err = unix.Exec(path, args, os.Environ())
	code = ExitNotExecutable
	if errors.Is(err, unix.ENOENT) {
		code = ExitNotFound
	}
	return shimFail(code, fmt.Sprintf("cannot execute %s: %v", args[0], err), commandHint(code, args[0]))
}

// resolveCommand finds the command as a shell would and classifies failures as 126 or 127.
func resolveCommand(name string) (string, int, error) {
	path := name
	if !strings.Contains(name, "/") {
		p, err := exec.LookPath(name)
		if err != nil {
			if errors.Is(err, exec.ErrNotFound) {
				return "", ExitNotFound, fmt.Errorf("command not found: %s", name)
			}
			return "", ExitNotExecutable, fmt.Errorf("cannot execute %s: %v", name, err)
		}
		path = p
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", ExitNotFound, fmt.Errorf("no such file: %s", name)
	case err != nil:
		return "", ExitNotExecutable, fmt.Errorf("cannot execute %s: %v", name, err)
	case st.IsDir():
		return "", ExitNotExecutable, fmt.Errorf("cannot execute %s: is a directory", name)
	case st.Mode()&0o111 == 0:
		return "", ExitNotExecutable, fmt.Errorf("cannot execute %s: permission denied", name)
	}
	return filepath.Clean(path), 0, nil
}

func commandHint(code int, name string) string {
	switch code {
	case ExitNotFound:
		return "the sandbox sees the host's files through an overlay and PATH as the profile passes it; check the name"
	case ExitNotExecutable:
		return fmt.Sprintf("make %s executable, or run it through its interpreter", name)
	}
	return ""
}

func shimFail(code int, msg, hint string) int {
	fmt.Fprintf(os.Stderr, "sbx: error: %s\n", msg)
	if hint != "" {
		fmt.Fprintf(os.Stderr, "sbx: hint: %s\n", hint)
	}
	return code
}

// pauseMain is pid 1 of the sandbox: it reaps every orphan until the sandbox is destroyed. It ignores the
// signals a process inside the sandbox could send it; teardown kills it with SIGKILL from the host.
func pauseMain() int {
	signal.Ignore(unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2,
		unix.SIGPIPE, unix.SIGTTIN, unix.SIGTTOU, unix.SIGTSTP)
	children := make(chan os.Signal, 16)
	signal.Notify(children, unix.SIGCHLD)
	for {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
		<-children
	}
}
