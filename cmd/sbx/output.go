package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
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
	"github.com/sbx-dev/sbx/sandbox/state"
)

// writeOutput writes a document to where a flag says: "-" is sbx's stdout, any other value a file,
// replaced (mode 0644) as reportTarget says, and "" nothing. Every flag that writes a document goes
// through it (probe --json, spec and export -o, export --json, the --json of list commands, report
// schema; exec --json through reportTarget, taken before its command runs). what names the document in
// the error.
func writeOutput(stdout io.Writer, path, what string, data []byte) error {
	t, err := openReportTarget("", path)
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
// A relative path is taken in base ("": the current directory).
func openReportTarget(base, path string) (*reportTarget, error) {
	t := &reportTarget{path: path}
	if path == "" || path == "-" {
		return t, nil
	}
	abs := path
	if base != "" && !filepath.IsAbs(path) {
		abs = filepath.Join(base, path)
	}
	abs, err := filepath.Abs(abs)
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

// write writes data to the target. FILE was removed when the target was taken, so sbx creates it
// anew (O_EXCL): whatever stands at FILE now (a link, a FIFO, a file another process made) was put
// there since, and is neither followed, nor opened, nor overwritten.
func (t *reportTarget) write(stdout io.Writer, what string, data []byte) error {
	if t.dir == nil {
		return writeRaw(stdout, t.path, what, data)
	}
	fd, err := unix.Openat(int(t.dir.Fd()), t.name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o644)
	if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("writing %s to %s: something took its place during the run (a link, a pipe, a file of another process's): %w", what, t.path, err)
	}
	if err != nil {
		return fmt.Errorf("writing %s to %s: %w", what, t.path, err)
	}
	return writeFd(fd, t.path, what, data)
}

// writeFd writes data to the file sbx just created at fd, and closes it.
func writeFd(fd int, path, what string, data []byte) error {
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("writing %s to %s: not a regular file (something else took its place during the run)", what, path)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("writing %s to %s: %w", what, path, err)
	}
	return nil
}

// writeOrDisplace writes data to the target, or, when that fails (something took FILE's place during
// the run, a co-tenant of a shared directory say, or the directory refuses the write), to a file of
// its own in the state root's reports directory, which no sandbox reaches: the report is not lost to
// whatever stood at FILE. displaced is that file ("" when FILE was written), why what failed at FILE.
func (t *reportTarget) writeOrDisplace(stdout io.Writer, stateRoot, what string, data []byte) (displaced string, why, err error) {
	why = t.write(stdout, what, data)
	if why == nil || t.dir == nil {
		return "", nil, why
	}
	displaced, err = writeDisplaced(stateRoot, t.name, data)
	if err != nil {
		return "", why, fmt.Errorf("%w; and in the state root: %w", why, err)
	}
	return displaced, why, nil
}

// writeDisplaced creates a new file in stateRoot/reports (a directory of sbx's user, mode 0700, opened
// without following a link) named for the time and name, and writes data to it (mode 0600).
func writeDisplaced(stateRoot, name string, data []byte) (string, error) {
	if stateRoot == "" {
		stateRoot = state.DefaultRootFor()
	}
	dir := filepath.Join(stateRoot, "reports")
	if err := os.MkdirAll(stateRoot, 0o711); err != nil {
		return "", err
	}
	if err := unix.Mkdir(dir, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("opening %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return "", err
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return "", fmt.Errorf("%s is not sbx's own (uid %d, mode %#o)", dir, st.Uid, st.Mode&0o777)
	}
	for try := 0; ; try++ {
		file := fmt.Sprintf("%s-%s-%s", time.Now().UTC().Format("20060102T150405Z"), randomHex(4), name)
		fd, err := unix.Openat(dfd, file, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EEXIST) && try < 8 {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("creating a report in %s: %w", dir, err)
		}
		path := filepath.Join(dir, file)
		return path, writeFd(fd, path, "the report", data)
	}
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// close releases the directory's handle.
func (t *reportTarget) close() {
	if t.dir != nil {
		t.dir.Close()
	}
}
