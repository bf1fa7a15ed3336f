package mcpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"
)

// HTTPHandler serves the server over the streamable HTTP transport, for callers that present token as a
// bearer token (Authorization: Bearer TOKEN; 401 otherwise) from no other origin than the endpoint's own
// on a loopback address (a request with another Origin header is refused with 403, as the MCP spec asks
// of servers, so that a web page in the user's browser cannot drive sbx). Origin is checked first: a
// cross-origin request learns nothing about the token. Served through HTTPServer, a request body is
// bounded in size and in the time it takes to arrive, and a refused request's connection is closed.
func (s *Server) HTTPHandler(token string) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, nil)
	return authHandler(token, DefaultHTTPLimits(), h)
}

// authHandler checks a request's origin and token before next sees it: a refused one closes its
// connection (it holds no slot past its answer); an accepted one marks its connection authenticated
// (limitListener) and has its body read whole within lim's bounds before next reads it.
func authHandler(token string, lim HTTPLimits, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !sameOriginLoopback(r) {
			w.Header().Set("Connection", "close")
			http.Error(w, "cross-origin request refused", http.StatusForbidden)
			return
		}
		if token == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("Connection", "close")
			w.Header().Set("WWW-Authenticate", `Bearer realm="sbx"`)
			http.Error(w, "a bearer token is required (the one sbx mcp printed at start, or its --token-file)", http.StatusUnauthorized)
			return
		}
		if c, ok := r.Context().Value(connKey{}).(*limitedConn); ok {
			c.authenticate()
		}
		if err := readBody(w, r, lim); err != nil {
			w.Header().Set("Connection", "close")
			status := http.StatusRequestTimeout
			if mb := (*http.MaxBytesError)(nil); errors.As(err, &mb) {
				status = http.StatusRequestEntityTooLarge
			}
			http.Error(w, "reading the request: "+err.Error(), status)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// readBody reads r's body whole, at most lim.MaxBody bytes and within lim.BodyTimeout, and puts it back
// for the handler: a caller cannot hold the request (and the run it asks for) open by sending its body a
// byte at a time. The deadline is lifted afterwards, so that a long run's reply and an event stream are
// not cut.
func readBody(w http.ResponseWriter, r *http.Request, lim HTTPLimits) error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(lim.BodyTimeout))
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, lim.MaxBody))
	if err != nil {
		return err // the deadline stays: the server's discarding the rest of the body is bounded too
	}
	_ = rc.SetReadDeadline(time.Time{})
	r.Body = io.NopCloser(bytes.NewReader(b))
	return nil
}

// HTTPLimits bound what a caller of the HTTP endpoint can hold of the server, authenticated or not.
type HTTPLimits struct {
	MaxConns           int           // open connections in all; past it a new one is closed at once
	MaxUnauthenticated int           // connections that have not yet sent a request with the token
	HeaderTimeout      time.Duration // to send a request's headers
	BodyTimeout        time.Duration // to send a request's body, once its headers are in
	IdleTimeout        time.Duration // a kept-alive connection between requests
	MaxHeaderBytes     int
	MaxBody            int64 // bytes of a request body
}

// DefaultHTTPLimits are the limits of sbx mcp --http: an MCP client holds a connection or two, and a
// request is a JSON-RPC message (an sbx_run with its stdin).
func DefaultHTTPLimits() HTTPLimits {
	return HTTPLimits{MaxConns: 128, MaxUnauthenticated: 16, HeaderTimeout: 10 * time.Second,
		BodyTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10, MaxBody: 16 << 20}
}

// HTTPServer returns the HTTP server of the endpoint and the listener to serve it on: ln with the caps
// of lim on connections. Unauthenticated connections are few and short-lived (their headers within
// HeaderTimeout, closed once answered), so that no local user without the token can exhaust the
// server's descriptors or hold the slots of callers that have it.
func (s *Server) HTTPServer(ln net.Listener, token string, lim HTTPLimits) (*http.Server, net.Listener) {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, nil)
	return newHTTPServer(ln, authHandler(token, lim, h), lim)
}

func newHTTPServer(ln net.Listener, h http.Handler, lim HTTPLimits) (*http.Server, net.Listener) {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: lim.HeaderTimeout, IdleTimeout: lim.IdleTimeout,
		MaxHeaderBytes: lim.MaxHeaderBytes,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		}}
	return hs, &limitListener{Listener: ln, lim: lim}
}

type connKey struct{}

// limitListener caps the connections it accepts: past MaxConns in all a new one is closed at once; past
// MaxUnauthenticated of those that have not yet sent the token, the oldest of those is closed, so that a
// caller with the token (who sends its request at once) still gets in while a flood holds the others.
type limitListener struct {
	net.Listener
	lim     HTTPLimits
	mu      sync.Mutex
	open    int
	unauth  []*limitedConn // oldest first
	refused int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitedConn{Conn: c, l: l}
		var evict *limitedConn
		l.mu.Lock()
		full := l.open >= l.lim.MaxConns
		if full {
			l.refused++
		} else {
			if len(l.unauth) >= l.lim.MaxUnauthenticated {
				evict = l.unauth[0]
				l.refused++
			}
			l.open++
			l.unauth = append(l.unauth, lc)
		}
		l.mu.Unlock()
		if evict != nil {
			evict.Close()
		}
		if full {
			c.Close()
			continue
		}
		return lc, nil
	}
}

// counts returns the open, unauthenticated and refused (or evicted) connections.
func (l *limitListener) counts() (open, unauth, refused int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, len(l.unauth), l.refused
}

// drop takes c off the unauthenticated list.
func (l *limitListener) drop(c *limitedConn) {
	if i := slices.Index(l.unauth, c); i >= 0 {
		l.unauth = slices.Delete(l.unauth, i, i+1)
	}
}

// limitedConn is one accepted connection, unauthenticated until a request on it carried the token.
type limitedConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitedConn) authenticate() {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	c.l.drop(c)
}

func (c *limitedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		defer c.l.mu.Unlock()
		c.l.open--
		c.l.drop(c)
	})
	return c.Conn.Close()
}

// ErrTokenFile is matched by the refusal of a --token-file that another user could read or replace.
var ErrTokenFile = errors.New("the token file is not private to the server's user")

// ReadTokenFile reads the bearer token from file: a regular file (not a link, nothing that blocks) owned
// by the server's user and neither readable nor writable by group or others, holding one token of at
// least 16 characters. A token that another local user can read lets that user run commands as the
// server; one they can write lets them choose it.
func ReadTokenFile(file string) (string, error) {
	fd, err := unix.Open(file, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return "", fmt.Errorf("reading --token-file: %w", &os.PathError{Op: "open", Path: file, Err: err})
	}
	f := os.NewFile(uintptr(fd), file)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", fmt.Errorf("reading --token-file: %w", err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return "", fmt.Errorf("--token-file %s is not a regular file", file)
	case int(st.Uid) != os.Geteuid():
		return "", fmt.Errorf("%w: --token-file %s belongs to uid %d, the server runs as uid %d", ErrTokenFile, file, st.Uid, os.Geteuid())
	case st.Mode&0o077 != 0:
		return "", fmt.Errorf("%w: --token-file %s has mode %#o: group or others may read or write it", ErrTokenFile, file, st.Mode&0o777)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("reading --token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if len(token) < 16 || strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("--token-file %s: want one token of at least 16 characters without spaces", file)
	}
	return token, nil
}

// sameOriginLoopback allows a request without an Origin header (not from a browser) and one whose
// Origin is the endpoint itself on a loopback host.
func sameOriginLoopback(r *http.Request) bool {
	origin := r.Header.Values("Origin")
	if len(origin) == 0 {
		return true
	}
	if len(origin) > 1 {
		return false
	}
	u, err := url.Parse(origin[0])
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host != r.Host {
		return false
	}
	return loopbackHost(u.Hostname())
}

func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// NewToken returns a random bearer token: 32 bytes, hex.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a token: %w", err)
	}
	return hex.EncodeToString(b), nil
}
