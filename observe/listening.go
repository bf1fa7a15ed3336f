package observe

import (
	"strings"

	"github.com/sbx-dev/sbx/report"
)

// listening reports whether the socket waits for peers: TCP and unix sockets in LISTEN, and bound but
// unconnected UDP and named unix datagram sockets (the datagram way of serving).
func listening(s report.Socket) bool {
	switch {
	case s.State == "LISTEN":
		return true
	case strings.HasPrefix(s.Proto, "udp"):
		return s.State == "UNCONN" && s.Port != 0
	case s.Proto == "unix" && s.Type == "dgram":
		return s.State == "UNCONN" && s.Address != ""
	}
	return false
}
