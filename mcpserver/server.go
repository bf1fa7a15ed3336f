// Package mcpserver serves sbx over the Model Context Protocol, so that an agent (Claude Code, Codex, an
// agent loop of its own) runs its commands in an sbx sandbox and gets back what they did and left behind.
//
// # Tools
//
//   - sbx_run runs one command through runner.Run and returns the sbx.report/v1 report as structured
//     content, with the command's stdout and stderr (capped, with truncated flags) and an id. A command
//     that exits non-zero or breaks the profile is a normal result; only a refusal (unknown profile, a
//     network wider than the profile's, bad input) or a failure of sbx itself is a tool error.
//     Cancelling the request tears the sandbox down.
//   - sbx_list_profiles and sbx_explain_profile describe the profiles a caller may name (read-only).
//   - sbx_get_report returns a past run by id; the same document is the resource sbx://reports/{id}.
//
// # Limits
//
// The caller picks among the profiles the operator allowed (Config.Profiles) and may only narrow a
// profile's network: a mode of none, or a subset of its allow list. It cannot share host paths, change
// limits beyond a shorter timeout, or name a profile file. Its cwd must lie in one of the operator's
// workspaces (Config.Workspaces), reached without a symbolic link, and not below a path the profile
// hides. Reports live in memory: the last Config.KeepReports runs within Config.KeepBytes, gone when
// the server exits.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/runner"
)

// Defaults of Config.
const (
	DefaultOutputCap     = 64 << 10
	DefaultKeepReports   = 32
	DefaultKeepBytes     = 64 << 20
	DefaultMaxConcurrent = 4
	DefaultProgressEvery = 5 * time.Second
)

// RunFunc carries out one run; runner.Run in production, a fake in tests.
type RunFunc func(context.Context, runner.Options) (*report.Report, error)

// Config is the operator's side of the server: what callers may ask for.
type Config struct {
	// Profiles are the profiles a caller may name, built-in names or files; the first is the default.
	// Empty: every built-in profile, with "default" the default.
	Profiles []string
	// Workspaces are the directory trees a caller's cwd must lie in; empty = Cwd, else the server's
	// working directory.
	Workspaces []string
	// Cwd is the working directory of a command whose call names none, and what a relative cwd is
	// relative to; "" = the first workspace. It must lie in a workspace.
	Cwd string
	// KeepBytes bounds the memory of the reports kept for sbx_get_report (their JSON size); 0 =
	// DefaultKeepBytes.
	KeepBytes int64
	// MaxTimeout caps every run (a caller's timeout_sec and the profile's); 0 = no cap.
	MaxTimeout time.Duration
	// OutputCap is how many bytes of stdout and of stderr a result carries; 0 = DefaultOutputCap.
	OutputCap int
	// KeepReports is how many past runs sbx_get_report can return; 0 = DefaultKeepReports.
	KeepReports int
	// MaxConcurrent bounds the runs in progress; further calls wait. 0 = DefaultMaxConcurrent.
	MaxConcurrent int
	// ProgressEvery is the interval of "running" progress notifications; 0 = DefaultProgressEvery.
	ProgressEvery time.Duration
	// Env is the environment profiles pass variables from (PATH, LANG, env.pass); nil = os.Environ().
	// A caller's env map is laid over it.
	Env       []string
	StateRoot string
	Version   string
	// Warm is how many sandboxes the server keeps built ahead for its default profile and working
	// directory, or for those of its last run (runner.Pool); 0 = none, every run starts cold.
	Warm int
	// OnPoolError hears of warm-pool failures no report carries (a build or background teardown); nil =
	// ignored (the run itself then starts cold, or gc removes what a teardown left).
	OnPoolError func(error)
	// Run replaces runner.Run, for tests.
	Run RunFunc
}

// Server is an sbx MCP server. It is safe for concurrent use by several sessions.
type Server struct {
	cfg      Config
	profiles map[string]string // name a caller uses → what policy.Load reads
	names    []string          // in the operator's order; names[0] is the default
	mcp      *mcp.Server
	reports  *store
	slots    chan struct{}
	ws       []workspace
	pool     *runner.Pool // nil without Warm
	plans    planCache
	builtins sync.Map // built-in profile name → *policy.Profile, loaded once (see profile)
}

// New checks the configuration (every profile must load) and returns a server with its tools.
func New(cfg Config) (*Server, error) {
	cfg = withDefaults(cfg)
	s := &Server{cfg: cfg, profiles: map[string]string{}, reports: newStore(cfg.KeepReports, cfg.KeepBytes),
		slots: make(chan struct{}, cfg.MaxConcurrent)}
	if err := s.loadProfiles(); err != nil {
		return nil, err
	}
	if err := s.openWorkspaces(); err != nil {
		return nil, err
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "sbx", Title: "sbx sandbox", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: instructions,
	})
	s.addTools()
	s.startPool()
	return s, nil
}

// startPool starts the warm pool, unless there is none or tests replaced the run, and warms it for
// the default profile and working directory.
func (s *Server) startPool() {
	if s.cfg.Run != nil {
		return
	}
	if s.cfg.Warm <= 0 {
		s.cfg.Run = runner.Run
		return
	}
	s.pool = runner.NewPool(s.cfg.Warm, s.cfg.StateRoot, s.cfg.OnPoolError)
	s.cfg.Run = s.pool.Run
	cwd, ws, err := resolveCwd(s.ws, s.cfg.Cwd, "")
	if err != nil {
		return
	}
	if plan, err := s.plan(RunInput{}, cwd); err == nil {
		s.pool.Warm(plan, cwd, ws.path)
	}
}

const instructions = `sbx runs a command in a throwaway Linux sandbox and reports what it did and left behind: ` +
	`processes still running, listening sockets, refused network attempts, DNS queries, file changes. ` +
	`Use sbx_run instead of running commands directly; read "verdict" and "violations" as well as "exit_code". ` +
	`Nothing the command writes reaches the host unless the profile shares a path.`

func withDefaults(cfg Config) Config {
	if len(cfg.Profiles) == 0 {
		cfg.Profiles = append([]string{"default"}, slices.DeleteFunc(policy.Builtins(), func(n string) bool { return n == "default" })...)
	}
	if cfg.OutputCap <= 0 {
		cfg.OutputCap = DefaultOutputCap
	}
	if cfg.KeepReports <= 0 {
		cfg.KeepReports = DefaultKeepReports
	}
	if cfg.KeepBytes <= 0 {
		cfg.KeepBytes = DefaultKeepBytes
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = DefaultMaxConcurrent
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = DefaultProgressEvery
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	return cfg
}

// loadProfiles loads every allowed profile once, so that a broken one fails at start, not at a call.
func (s *Server) loadProfiles() error {
	var loaded []*policy.Profile
	for _, arg := range s.cfg.Profiles {
		p, err := policy.Load(arg)
		if err != nil {
			return err
		}
		if prev, dup := s.profiles[p.Name]; dup {
			return fmt.Errorf("profiles %s and %s are both named %q", prev, arg, p.Name)
		}
		s.profiles[p.Name] = arg
		s.names = append(s.names, p.Name)
		loaded = append(loaded, p)
	}
	return profilesOutOfReach(loaded)
}

// ErrProfileInShare is matched by the error of a server whose profile file lies in a writable share.
var ErrProfileInShare = errors.New("a profile file lies in a writable share")

// profilesOutOfReach refuses profile files (their own and those they extend) that lie in a writable
// share of any offered profile. A file profile is read again on every call, so a command run with a
// share over it could rewrite the profile of every later call: share the host's home read-write,
// widen the network, run as the operator's uid. A caller may narrow a profile, never widen it.
func profilesOutOfReach(ps []*policy.Profile) error {
	for _, p := range ps {
		for _, sh := range p.Filesystem.Share {
			if sh.Mode != policy.ShareRW {
				continue
			}
			host := realPath(sh.Host)
			for _, q := range ps {
				for _, f := range q.Files() {
					if within(realPath(f), host) {
						return fmt.Errorf("%w: %s (profile %s) lies in %s, which profile %s shares read-write: a command could rewrite the profile of later calls",
							ErrProfileInShare, f, q.Name, sh.Host, p.Name)
					}
				}
			}
		}
	}
	return nil
}

// realPath is path with its links resolved where it exists, else path itself.
func realPath(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real
	}
	return filepath.Clean(path)
}

// openWorkspaces opens the workspaces and checks that the default cwd lies in one.
func (s *Server) openWorkspaces() error {
	dirs := s.cfg.Workspaces
	if len(dirs) == 0 {
		dir := s.cfg.Cwd
		if dir == "" {
			wd, err := os.Getwd()
			if err != nil {
				return fmt.Errorf("finding the working directory: %w", err)
			}
			dir = wd
		}
		dirs = []string{dir}
	}
	ws, err := openWorkspaces(dirs)
	if err != nil {
		return err
	}
	s.ws = ws
	if s.cfg.Cwd == "" {
		s.cfg.Cwd = ws[0].path
	}
	if s.cfg.Cwd, _, err = resolveCwd(ws, "/", s.cfg.Cwd); err != nil {
		s.Close()
		return fmt.Errorf("the default working directory: %w", err)
	}
	return nil
}

// Close destroys the warm pool's sandboxes, waits for the teardowns still running in the background
// and releases the workspaces' handles.
func (s *Server) Close() {
	if s.pool != nil {
		if err := s.pool.Close(); err != nil && s.cfg.OnPoolError != nil {
			s.cfg.OnPoolError(err)
		}
	}
	closeWorkspaces(s.ws)
	s.ws = nil
}

// MCP returns the underlying MCP server, to run it over a transport of the caller's choice.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Run serves one session over t (mcp.StdioTransport for stdio) until the client leaves or ctx ends.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error { return s.mcp.Run(ctx, t) }

// profile loads the profile a caller named ("" = the default); a name outside Config.Profiles is refused.
func (s *Server) profile(name string) (*policy.Profile, error) {
	if name == "" {
		name = s.names[0]
	}
	arg, ok := s.profiles[name]
	if !ok {
		return nil, fmt.Errorf("profile %q is not offered by this server (offered: %v)", name, s.names)
	}
	// A built-in profile is part of the binary and never changes: it is parsed once (a third of a
	// millisecond of every warm run). A profile from a file is read again on every call, so that an
	// edit counts from the next run. Nothing changes a loaded profile (narrow copies it).
	if !policy.IsBuiltinName(arg) {
		return policy.Load(arg)
	}
	if p, ok := s.builtins.Load(arg); ok {
		return p.(*policy.Profile), nil
	}
	p, err := policy.Load(arg)
	if err != nil {
		return nil, err
	}
	s.builtins.Store(arg, p)
	return p, nil
}
