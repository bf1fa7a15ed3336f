//go:build !nomcp

package main

import (
	"context"
	"errors"
	"fmt"
	goio "io"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbx-dev/sbx/internal/selfexe"
	"github.com/sbx-dev/sbx/mcpserver"
)

// The server's own error gets its hint first (the first match wins).
func init() {
	errorHints = append([]errorHint{{mcpserver.ErrProfileInShare, anyCaller, "move the profile out of every read-write share of the offered profiles, or share that path read-only"}}, errorHints...)
}

// serveMCP runs the MCP server in this process: sbx-mcp, or any sbx built without the tag nomcp (a plain
// go build ./cmd/sbx, the tests).
func serveMCP(ctx context.Context, io stdio, f mcpFlags) error {
	if err := checkBuild(nil); err != nil {
		return err
	}
	if err := checkPrivileges("sbx mcp"); err != nil {
		return err
	}
	// The server builds a sandbox per call: sealed once here, its binary need not be sealed for each.
	selfexe.Seal()
	if f.http != "" {
		if err := checkLoopback(f.http, f.anyAddr); err != nil {
			return err
		}
	}
	if f.tokenFile != "" && f.http == "" {
		return setupError(errors.New("--token-file needs --http"), "the stdio transport has no token: its caller is the process that started sbx")
	}
	// The token before anything is built: a token file others can read is refused up front.
	token := ""
	if f.http != "" {
		var err error
		if token, err = httpToken(f.tokenFile); err != nil {
			return err
		}
	}
	cwd := ""
	if f.workdir != "" || len(f.workspaces) == 0 {
		var err error
		if cwd, err = workdir("", f.workdir); err != nil {
			return setupError(err, "")
		}
	}
	srv, err := mcpserver.New(mcpserver.Config{
		Workspaces: f.workspaces, Profiles: f.profiles, Cwd: cwd, MaxTimeout: f.maxTimeout, KeepReports: f.keep, OutputCap: f.outputCap,
		MaxConcurrent: f.concurrency, StateRoot: stateRoot(), Version: buildVersion(), Warm: f.warm,
		OnPoolError: func(err error) { fmt.Fprintf(io.err, "sbx: warning: %v\n", err) },
	})
	if err != nil {
		return setupError(err, "")
	}
	defer srv.Close()
	if f.http == "" {
		err = srv.Run(ctx, &mcp.IOTransport{Reader: readCloser{io.in}, Writer: writeCloser{io.out}})
	} else {
		err = serveHTTP(ctx, io, srv, f.http, token, f.tokenFile == "")
	}
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return ee
	case err != nil && ctx.Err() == nil:
		return setupError(err, "")
	}
	return nil
}

// checkLoopback refuses a non-loopback listen address unless asked for: the endpoint runs commands
// for whoever reaches it.
func checkLoopback(addr string, anyAddr bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return setupError(fmt.Errorf("--http %q: %w", addr, err), "write --http 127.0.0.1:8765")
	}
	if host == "localhost" || anyAddr {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return setupError(fmt.Errorf("--http %s is not a loopback address", addr),
		"the endpoint runs commands and its token travels in clear: use 127.0.0.1:PORT, or add --listen-any behind a TLS proxy")
}

// serveHTTP serves srv on addr with the caps of mcpserver.DefaultHTTPLimits; a random token (printed) when
// the caller gave no --token-file.
func serveHTTP(ctx context.Context, io stdio, srv *mcpserver.Server, addr, token string, printToken bool) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	hs, ln := srv.HTTPServer(ln, token, mcpserver.DefaultHTTPLimits())
	fmt.Fprintf(io.err, "sbx: serving MCP on http://%s/\n", ln.Addr())
	if printToken {
		fmt.Fprintf(io.err, "sbx: bearer token: %s\n", token)
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// httpToken reads the bearer token from file, or makes a random one when file is "".
func httpToken(file string) (string, error) {
	if file == "" {
		tok, err := mcpserver.NewToken()
		if err != nil {
			return "", setupError(err, "")
		}
		return tok, nil
	}
	tok, err := mcpserver.ReadTokenFile(file)
	switch {
	case errors.Is(err, mcpserver.ErrTokenFile):
		return "", setupError(err, "make it the server's own and private: chown $(id -u) FILE && chmod 600 FILE (any other user who reads it can run commands as the server)")
	case err != nil:
		return "", setupError(err, "the file holds the token on one line; or leave --token-file out for a random one")
	}
	return tok, nil
}

// readCloser and writeCloser let the server's stdio (or a test's buffers) serve as an IOTransport
// without closing the process's own descriptors.
type readCloser struct{ r goio.Reader }

func (r readCloser) Read(p []byte) (int, error) { return r.r.Read(p) }
func (readCloser) Close() error                 { return nil }

type writeCloser struct{ w goio.Writer }

func (w writeCloser) Write(p []byte) (int, error) { return w.w.Write(p) }
func (writeCloser) Close() error                  { return nil }
