package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/report/ocsf"
)

// writeOutput writes a document to where a flag says: "-" is sbx's stdout, any other value a file,
// replaced (mode 0644) as reportTarget says, and "" nothing. Every flag that writes a document goes
// through it (probe --json, spec and export -o, export --json, the --json of list commands, report
// schema; exec --json through reportTarget, taken before its command runs). what names the document in
// the error.
func writeOutput(stdout io.Writer, path, what string, data []byte) error {
	t, err := openReportTarget(path)
	if err != nil {
		return err
	}
	defer t.close()
	return t.write(stdout, what, data)
}

// writeRaw writes data to "-" (stdout), to nothing (""), or through path as the caller named it (a
// stream: see reportTarget).
func writeRaw(stdout io.Writer, path, what string, data []byte) error {
	var err error
	switch path {
	case "":
		return nil
	case "-":
		_, err = stdout.Write(data)
	default:
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", what, err)
	}
	return nil
}

// writeJSON writes v as indented JSON, as writeOutput does.
func writeJSON(stdout io.Writer, path, what string, v any) error {
	if path == "" {
		return nil
	}
	data, err := indentJSON(what, v)
	if err != nil {
		return err
	}
	return writeOutput(stdout, path, what, data)
}

// indentJSON is v as indented JSON with a final newline.
func indentJSON(what string, v any) ([]byte, error) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", what, err)
	}
	return append(data, '\n'), nil
}

// ocsfLines is the report as OCSF events, one JSON object a line.
func ocsfLines(rep *report.Report) ([]byte, error) {
	host, _ := os.Hostname()
	events := ocsf.Convert(rep, ocsf.Options{Time: time.Now(), Hostname: host, Version: buildVersion()})
	var b bytes.Buffer
	if err := ocsf.WriteLines(&b, events); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// reportTarget is where exec --json FILE goes, taken before the command runs. The command may write
// where a writable share lies, and must not choose where sbx (as root) writes: a link planted at FILE
// made sbx write the report to any path of the host. A FILE that is a regular file, or missing, is
// written through a handle on its directory opened now, never through a link and never into anything
// but a regular file (O_NOFOLLOW, O_NONBLOCK, the type checked on the fd); an old report there is removed
// now, so that a run that fails (exit 125) leaves none to be read as its own. A FILE that is a link to a
// regular file is refused: an earlier run's command may have planted it in a share. What the caller
// names as a stream (a pipe, a device, /dev/stdout, a shell's process substitution /dev/fd/N, which are
// links below /dev or /proc) is written as it is (writeRaw). Every flag that writes a document goes
// through it (writeOutput); exec takes it before its command runs.
type reportTarget struct {
	path string
	dir  *os.File // O_PATH handle of FILE's directory; nil: writeRaw(path)
	name string
}

// openReportTarget takes the place of the file a flag names (exec --json FILE, -o FILE); for "" and "-"
// there is nothing to take.
func openReportTarget(path string) (*reportTarget, error) {
	t := &reportTarget{path: path}
	if path == "" || path == "-" {
		return t, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	st, err := os.Lstat(abs)
	switch {
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s: %w", path, err)
	case err == nil && st.Mode()&fs.ModeSymlink != 0:
		if stream(abs) {
			return t, nil
		}
		return nil, fmt.Errorf("%s is a symbolic link to a file (a command of an earlier run with a writable share may have planted it): sbx writes only a file of its own there", path)
	case err == nil && !st.Mode().IsRegular():
		return t, nil // the caller's stream: a pipe, a device
	}
	dir, err := os.OpenFile(filepath.Dir(abs), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: its directory: %w", path, err)
	}
	t.dir, t.name = dir, filepath.Base(abs)
	if st != nil { // a regular file: an old report
		if err := unix.Unlinkat(int(dir.Fd()), t.name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			dir.Close()
			return nil, fmt.Errorf("%s: removing the old file: %w", path, err)
		}
	}
	return t, nil
}

// stream says whether the link at abs is the caller's stream: one below /dev or /proc (/dev/stdout,
// /dev/fd/N), or one that leads to a pipe, a socket or a device.
func stream(abs string) bool {
	if strings.HasPrefix(abs, "/dev/") || strings.HasPrefix(abs, "/proc/") {
		return true
	}
	st, err := os.Stat(abs)
	return err == nil && st.Mode()&(fs.ModeNamedPipe|fs.ModeSocket|fs.ModeDevice|fs.ModeCharDevice) != 0
}

// write writes data to the target.
func (t *reportTarget) write(stdout io.Writer, what string, data []byte) error {
	if t.dir == nil {
		return writeRaw(stdout, t.path, what, data)
	}
	fd, err := unix.Openat(int(t.dir.Fd()), t.name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o644)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("writing %s to %s: a link or a pipe took its place during the run: %w", what, t.path, err)
	}
	if err != nil {
		return fmt.Errorf("writing %s to %s: %w", what, t.path, err)
	}
	f := os.NewFile(uintptr(fd), t.path)
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("writing %s to %s: not a regular file any more (something else took its place during the run)", what, t.path)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", what, err)
	}
	return nil
}

// close releases the directory's handle.
func (t *reportTarget) close() {
	if t.dir != nil {
		t.dir.Close()
	}
}
