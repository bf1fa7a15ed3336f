package report

import (
	"net"
	"strconv"
	"strings"
)

// Describe returns a one-line description of the socket for humans, e.g. "tcp 0.0.0.0:8080 LISTEN",
// "tcp 10.0.0.2:40000 -> 1.2.3.4:443 ESTABLISHED" or "unix stream @name LISTEN".
func (s Socket) Describe() string {
	var b strings.Builder
	b.WriteString(s.Proto)
	if s.Type != "" {
		b.WriteString(" " + s.Type)
	}
	b.WriteString(" " + s.Local())
	if s.Remote != "" {
		b.WriteString(" -> " + s.Remote)
	}
	if s.State != "" {
		b.WriteString(" " + s.State)
	}
	return b.String()
}

// Local returns the local end as "address:port" for inet sockets, the name for unix sockets ("" when
// unnamed).
func (s Socket) Local() string {
	if s.Proto == "unix" {
		return s.Address
	}
	return net.JoinHostPort(s.Address, strconv.Itoa(s.Port))
}

// Describe returns a one-line description of the fd for humans: its target, with what the socket is
// when known and a "(deleted)" mark for files unlinked while open.
func (fd FD) Describe() string {
	d := strconv.Itoa(fd.FD) + " " + fd.Target
	if fd.Socket != "" {
		d += " " + fd.Socket
	}
	if fd.Deleted {
		d += " (deleted)"
	}
	return d
}
