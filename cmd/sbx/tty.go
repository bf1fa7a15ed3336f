package main

import (
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/containerd/console"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/runner"
)

// wireTerminal gives the command a terminal of its own when sbx runs on one. The command never gets the
// caller's terminal itself, so it cannot push input into it (TIOCSTI) or change its settings. The
// returned function restores the caller's terminal.
func wireTerminal(o *runner.Options) (restore func()) {
	in, inOK := o.Stdin.(*os.File)
	out, outOK := o.Stdout.(*os.File)
	if !inOK || !outOK || !isTerminal(in) || !isTerminal(out) {
		return func() {}
	}
	cur, err := console.ConsoleFromFile(in)
	if err != nil {
		return func() {}
	}
	o.Terminal = true
	copied := make(chan struct{})
	var master console.Console
	winch := make(chan os.Signal, 1)
	restoreMode := func() {}
	o.OnConsole = func(f *os.File) {
		master, err = console.ConsoleFromFile(f)
		if err != nil {
			close(copied)
			return
		}
		restoreMode = setRaw(in)
		resize(cur, master)
		signal.Notify(winch, unix.SIGWINCH)
		go func() {
			for range winch {
				resize(cur, master)
			}
		}()
		go io.Copy(master, in)
		go func() {
			io.Copy(out, master)
			close(copied)
		}()
	}
	return func() {
		if master == nil {
			return
		}
		signal.Stop(winch)
		// Output still in flight is drained briefly; a process left running may hold the terminal open.
		select {
		case <-copied:
		case <-time.After(100 * time.Millisecond):
		}
		master.Close()
		restoreMode()
	}
}

func resize(from, to console.Console) {
	if size, err := from.Size(); err == nil {
		to.Resize(size)
	}
}

// setRaw puts the caller's terminal into raw mode, output processing included, and returns what
// restores it. The command's own terminal already does its output processing (ONLCR turns \n into
// \r\n): a second pass on the caller's side would make every line end \r\r\n. (console's SetRaw
// keeps OPOST on.)
func setRaw(f *os.File) (restore func()) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return func() {}
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return func() {}
	}
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }
}

// stdioTerminal says whether the run gets a terminal of its own (wireTerminal): sbx's stdin and stdout
// are terminals.
func stdioTerminal(o runner.Options) bool {
	in, inOK := o.Stdin.(*os.File)
	out, outOK := o.Stdout.(*os.File)
	return inOK && outOK && isTerminal(in) && isTerminal(out)
}
