package main

import (
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// sbx mcp: the command and its flags are defined here for every build; the server itself
// (mcp_serve.go) is linked into sbx-mcp, and bin/sbx (built with the tag nomcp) hands the command over
// to that binary (mcp_forward.go). The MCP SDK and what it brings (net/http, encoding/gob, the JSON
// Schema generator) cost every process that links them about 3 ms of package initialization (5-13%
// of a cold sbx exec on a host where page faults are dear), which no run of sbx exec needs.

// The defaults of the flags: mcpserver's (TestMCPFlagDefaults), named here so that a build without
// the server has the same flags and help.
const (
	mcpDefaultKeep        = 32
	mcpDefaultOutputCap   = 64 << 10
	mcpDefaultConcurrency = 4
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
  sudo sh -c 'umask 077 && mkdir -p /etc/sbx && openssl rand -hex 32 > /etc/sbx/mcp-token'
  sudo sbx mcp --http 127.0.0.1:8765 --token-file /etc/sbx/mcp-token`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return serveMCP(c.Context(), io, f)
		},
	}, unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	fl := c.Flags()
	fl.StringArrayVarP(&f.profiles, "profile", "p", nil, "offer this `PROFILE` (built-in name or YAML file); repeatable, the first is the default")
	fl.StringVar(&f.http, "http", "", "serve streamable HTTP on `ADDR` (host:port, loopback unless --listen-any) instead of stdio")
	fl.BoolVar(&f.anyAddr, "listen-any", false, "allow --http on a non-loopback address (behind a proxy with TLS: the token travels in clear)")
	fl.StringVar(&f.tokenFile, "token-file", "", "with --http: the bearer token callers must send, read from `FILE` (yours, mode 600; default: a random one, printed at start)")
	fl.StringVarP(&f.workdir, "workdir", "w", "", "working directory of commands whose call names none (default: the first workspace)")
	fl.StringArrayVar(&f.workspaces, "workspace", nil, "let callers work in `DIR` and below (repeatable; default: the -w directory, else the current one)")
	fl.DurationVar(&f.maxTimeout, "max-timeout", 10*time.Minute, "cap every run at `DURATION` (0: no cap)")
	fl.IntVar(&f.keep, "keep", mcpDefaultKeep, "keep the last `N` reports for sbx_get_report")
	fl.IntVar(&f.outputCap, "output-cap", mcpDefaultOutputCap, "bytes of stdout and of stderr a result carries")
	fl.IntVar(&f.concurrency, "concurrency", mcpDefaultConcurrency, "runs at a time; further calls wait")
	fl.IntVar(&f.warm, "warm", 2, "keep `N` sandboxes built ahead for the default profile and working directory (or the last run's); 0 = every run starts cold")
	return c
}
