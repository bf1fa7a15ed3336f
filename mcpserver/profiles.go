package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbx-dev/sbx/policy"
)

// ProfileInfo is one profile as sbx_list_profiles shows it.
type ProfileInfo struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Default     bool     `json:"default" jsonschema:"used when sbx_run names no profile"`
	Network     string   `json:"network" jsonschema:"none or contract"`
	Allow       []string `json:"allow" jsonschema:"destinations the contract allows; a call may narrow to a subset"`
}

// ProfileList is the output of sbx_list_profiles.
type ProfileList struct {
	Profiles []ProfileInfo `json:"profiles"`
}

// ExplainInput is the input of sbx_explain_profile.
type ExplainInput struct {
	Profile string `json:"profile,omitempty" jsonschema:"profile name; default: the server's default"`
}

// Explanation is the output of sbx_explain_profile.
type Explanation struct {
	ProfileInfo
	Hash    string   `json:"sha256" jsonschema:"sha256 of the resolved profile, as reports and annotations name it"`
	Summary []string `json:"summary" jsonschema:"what the profile allows and expects, one line per rule"`
	YAML    string   `json:"yaml" jsonschema:"the resolved profile (extends merged in)"`
}

func readOnly(title string) *mcp.ToolAnnotations {
	closed := false
	return &mcp.ToolAnnotations{Title: title, ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &closed}
}

func (s *Server) addProfileTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "sbx_list_profiles",
		Description: "List the sbx profiles sbx_run accepts, with what each is for and the network it allows.",
		Annotations: readOnly("sbx profiles"),
	}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, *ProfileList, error) {
		list := &ProfileList{Profiles: []ProfileInfo{}}
		var text strings.Builder
		for _, name := range s.names {
			p, err := s.profile(name)
			if err != nil {
				return nil, nil, err
			}
			info := s.info(p)
			list.Profiles = append(list.Profiles, info)
			fmt.Fprintf(&text, "%s: %s (network %s)\n", info.Name, info.Description, info.Network)
		}
		return textResult(text.String()), list, nil
	})
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "sbx_explain_profile",
		Description: "Explain one sbx profile: filesystem, network, limits and what a command may leave behind.",
		Annotations: readOnly("explain an sbx profile"),
	}, func(_ context.Context, _ *mcp.CallToolRequest, in ExplainInput) (*mcp.CallToolResult, *Explanation, error) {
		ex, err := s.explain(in.Profile)
		if err != nil {
			return nil, nil, err
		}
		return textResult(strings.Join(ex.Summary, "\n") + "\n"), ex, nil
	})
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func (s *Server) info(p *policy.Profile) ProfileInfo {
	info := ProfileInfo{Name: p.Name, Description: p.Description, Default: p.Name == s.names[0],
		Network: string(p.Network.Mode), Allow: []string{}}
	if info.Network == "" {
		info.Network = policy.NetNone
	}
	for _, r := range p.Network.Allow {
		info.Allow = append(info.Allow, r.String())
	}
	return info
}

func (s *Server) explain(name string) (*Explanation, error) {
	p, err := s.profile(name)
	if err != nil {
		return nil, err
	}
	text, err := p.Marshal()
	if err != nil {
		return nil, err
	}
	plan, err := policy.Compile(p, policy.CompileContext{Cwd: s.cfg.Cwd, CallerEnv: nil})
	if err != nil {
		return nil, err
	}
	return &Explanation{ProfileInfo: s.info(p), Hash: plan.Hash(), Summary: explainPlan(plan), YAML: string(text)}, nil
}

// explainPlan says in a few lines what a compiled profile allows and expects.
func explainPlan(p *policy.Plan) []string {
	out := []string{fmt.Sprintf("profile %s (sha256 %.12s)", p.Profile, p.Hash())}
	fs := p.Filesystem
	write := strings.Join(fs.Write, ", ")
	if fs.WriteCwd {
		write += ", the working directory"
	}
	out = append(out,
		"filesystem: the host's / through a throwaway overlay; nothing written reaches the host unless shared",
		fmt.Sprintf("landlock: read %s; write %s", strings.Join(fs.Read, ", "), write))
	if len(fs.Hidden) > 0 {
		out = append(out, "hidden: "+strings.Join(fs.Hidden, ", "))
	}
	for _, sh := range fs.Shares {
		mode := "read-only"
		if sh.Writable {
			mode = "read-write (writes reach the host)"
		}
		out = append(out, fmt.Sprintf("shared: %s at %s, %s", sh.Host, sh.Sandbox, mode))
	}
	out = append(out, explainNetwork(p.Network)...)
	out = append(out, explainLimits(p)...)
	return append(out, explainExpect(p.Expect)...)
}

func explainNetwork(n policy.Network) []string {
	if n.Mode != policy.NetContract {
		return []string{"network: none (loopback only)"}
	}
	out := []string{"network: contract; egress refused unless allowed; cloud metadata, private, link-local, CGNAT and ULA ranges always refused"}
	for _, r := range n.Allow {
		out = append(out, "  allow "+r.String())
	}
	for _, r := range n.Deny {
		out = append(out, "  deny "+r.String())
	}
	if len(n.DNS.Allow) > 0 {
		out = append(out, "  dns resolves only: "+strings.Join(n.DNS.Allow, ", "))
	}
	return out
}

func explainLimits(p *policy.Plan) []string {
	l := p.Limits
	parts := []string{}
	if l.MemoryBytes > 0 {
		parts = append(parts, fmt.Sprintf("memory %d MiB", l.MemoryBytes>>20))
	}
	if l.Pids > 0 {
		parts = append(parts, fmt.Sprintf("%d processes", l.Pids))
	}
	if l.CPUs > 0 {
		parts = append(parts, fmt.Sprintf("%g CPUs", l.CPUs))
	}
	if p.Timeout > 0 {
		parts = append(parts, "timeout "+p.Timeout.String())
	}
	if len(parts) == 0 {
		return []string{"limits: none"}
	}
	return []string{"limits: " + strings.Join(parts, ", ")}
}

func explainExpect(e policy.Expect) []string {
	left := "nothing may be left running"
	if e.LeftRunning {
		left = "processes may be left running"
	}
	listeners := "no listeners allowed"
	if len(e.Listeners) > 0 {
		ls := make([]string, len(e.Listeners))
		for i, l := range e.Listeners {
			ls[i] = l.String()
		}
		listeners = "listeners allowed: " + strings.Join(ls, ", ")
	}
	out := []string{"expect: " + left + "; " + listeners}
	if e.DeniedIsViolation {
		out = append(out, "expect: a refused network attempt is a violation")
	}
	if e.DNSRefusedIsViolation {
		out = append(out, "expect: a refused DNS query is a violation")
	}
	if e.Writes != nil {
		out = append(out, "expect: writes only under "+strings.Join(e.Writes, ", "))
	}
	if e.Execs != nil {
		out = append(out, "expect: only these executables run: "+strings.Join(e.Execs, ", "))
	}
	if !e.PersistenceAllowed {
		out = append(out, "expect: planting persistence (cron, shell start-up files, authorized_keys, git hooks, ...) is a violation, even when refused")
	}
	return out
}
