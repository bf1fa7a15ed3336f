package main

import (
	"context"
	"errors"
	"fmt"
	goio "io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/selfexe"
	"github.com/sbx-dev/sbx/mcpserver"
)

type mcpFlags struct {
	profiles    []string
	http        string
	anyAddr     bool
	workdir     string
	workspaces  []string
	tokenFile   string
	maxTimeout  time.Duration
	keep        int
	outputCap   int
	concurrency int
	warm        int
}

func newMCPCmd(io stdio) *cobra.Command {
	var f mcpFlags
	c := cancelOnSignal(&cobra.Command{
		Use:   "mcp [flags]",
		Short: "Serve sbx to agents over the Model Context Protocol (stdio or HTTP)",
		Long: `mcp serves sbx as an MCP server: an agent calls the tool sbx_run with a command and gets
back the sbx.report/v1 report (verdict, violations, what was left running or listening, refused
network attempts, file changes) with the command's stdout and stderr. Tools sbx_list_profiles,
sbx_explain_profile and sbx_get_report go with it. Serves stdio by default; --http serves the
streamable HTTP transport on a loopback address.

A caller may pick one of the offered profiles (-p, repeatable; default: every built-in, "default"
first) and narrow its network, never widen it. Its cwd must lie in a workspace (--workspace,
repeatable; default: the -w directory, else the current one), reached without symbolic links, and
not below a path the profile hides. Over HTTP every request needs the bearer token sbx prints at
start (or reads from --token-file), and a request from another web origin is refused. See
docs/AGENTS.md.

Examples:
  claude mcp add sbx -- sudo sbx mcp
  sudo sbx mcp -p default -p python-build -w ~/project --max-timeout 10m
  sudo sbx mcp --workspace ~/a --workspace ~/b -w ~/a
  sudo sbx mcp --http 127.0.0.1:8765 --token-file /etc/sbx/mcp-token`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runMCP(c.Context(), io, f)
		},
	}, unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	fl := c.Flags()
	fl.StringArrayVarP(&f.profiles, "profile", "p", nil, "offer this `PROFILE` (built-in name or YAML file); repeatable, the first is the default")
	fl.StringVar(&f.http, "http", "", "serve streamable HTTP on `ADDR` (host:port, loopback unless --listen-any) instead of stdio")
	fl.BoolVar(&f.anyAddr, "listen-any", false, "allow --http on a non-loopback address (behind a proxy with TLS: the token travels in clear)")
	fl.StringVar(&f.tokenFile, "token-file", "", "with --http: the bearer token callers must send, read from `FILE` (default: a random one, printed at start)")
	fl.StringVarP(&f.workdir, "workdir", "w", "", "working directory of commands whose call names none (default: the first workspace)")
	fl.StringArrayVar(&f.workspaces, "workspace", nil, "let callers work in `DIR` and below (repeatable; default: the -w directory, else the current one)")
	fl.DurationVar(&f.maxTimeout, "max-timeout", 10*time.Minute, "cap every run at `DURATION` (0: no cap)")
	fl.IntVar(&f.keep, "keep", mcpserver.DefaultKeepReports, "keep the last `N` reports for sbx_get_report")
	fl.IntVar(&f.outputCap, "output-cap", mcpserver.DefaultOutputCap, "bytes of stdout and of stderr a result carries")
	fl.IntVar(&f.concurrency, "concurrency", mcpserver.DefaultMaxConcurrent, "runs at a time; further calls wait")
	fl.IntVar(&f.warm, "warm", 2, "keep `N` sandboxes built ahead for the default profile and working directory (or the last run's); 0 = every run starts cold")
	return c
}

func runMCP(ctx context.Context, io stdio, f mcpFlags) error {
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
	cwd := ""
	if f.workdir != "" || len(f.workspaces) == 0 {
		var err error
		if cwd, err = workdir(f.workdir); err != nil {
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
		err = serveHTTP(ctx, io, srv, f.http, f.tokenFile)
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

func serveHTTP(ctx context.Context, io stdio, srv *mcpserver.Server, addr, tokenFile string) error {
	token, err := httpToken(tokenFile)
	if err != nil {
		return setupError(err, "the file holds the token on one line; or leave --token-file out for a random one")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.HTTPHandler(token), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(io.err, "sbx: serving MCP on http://%s/\n", ln.Addr())
	if tokenFile == "" {
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
		return mcpserver.NewToken()
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("reading --token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if len(token) < 16 || strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("--token-file %s: want one token of at least 16 characters without spaces", file)
	}
	return token, nil
}

// readCloser and writeCloser let the server's stdio (or a test's buffers) serve as an IOTransport
// without closing the process's own descriptors.
type readCloser struct{ r goio.Reader }

func (r readCloser) Read(p []byte) (int, error) { return r.r.Read(p) }
func (readCloser) Close() error                 { return nil }

type writeCloser struct{ w goio.Writer }

func (w writeCloser) Write(p []byte) (int, error) { return w.w.Write(p) }
func (writeCloser) Close() error                  { return nil }
