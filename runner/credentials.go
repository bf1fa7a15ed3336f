package runner

import (
	"bytes"
	"slices"
	"strings"

	"github.com/sbx-dev/sbx/observe"
	"github.com/sbx-dev/sbx/policy"
	"github.com/sbx-dev/sbx/report"
)

// decoysTouched names each decoy secret the command read, changed or removed. It runs first after the
// command: the file changes' reading reads the layer, and would itself read a decoy.
func (r *run) decoysTouched() {
	touched, how := r.sb.DecoyAccesses()
	for i, d := range touched {
		r.decoyRead = true
		if d.ReadByTools && how[i] == "read" {
			continue // npm reads its .npmrc, bash its history: only where the value goes counts
		}
		r.rep.Credentials = append(r.rep.Credentials, report.Credential{Mechanism: d.Mechanism, Path: d.Path, Access: how[i]})
	}
}

// keyringSyscalls reach the kernel's keyrings, where secrets live too; the sandbox refuses them.
var keyringSyscalls = []string{"keyctl", "add_key", "request_key"}

// credentialsSent names decoy values found in what the command sent (DNS questions) or left (the files
// it created or changed, as far as the persistence peek reads them, in the layers and the shares), and
// refused calls into the kernel's keyrings. A decoy's value is unique to the run: only a command that
// read a decoy can have it, so the look is taken only when one was read (no cost for a clean run).
func (r *run) credentialsSent() {
	for _, s := range r.rep.Denials.Seccomp {
		if slices.Contains(keyringSyscalls, s.Syscall) {
			r.rep.Credentials = append(r.rep.Credentials, report.Credential{Mechanism: policy.CredKeyring, Path: s.Syscall, Access: "refused"})
			break
		}
	}
	if !r.decoyRead {
		return
	}
	decoys := r.sb.Decoys()
	isDecoy := map[string]bool{}
	for _, d := range decoys {
		isDecoy[d.Path] = true
	}
	for _, q := range r.rep.Network.DNS {
		name := strings.ToLower(strings.ReplaceAll(q.Name, ".", ""))
		for _, d := range decoys {
			if strings.Contains(name, strings.ToLower(d.Token)) {
				r.rep.Credentials = append(r.rep.Credentials, report.Credential{Mechanism: policy.CredExfiltrated, Path: d.Path, Access: "sent in a DNS question for " + q.Name})
			}
		}
	}
	for _, c := range r.rep.Files.Details {
		if c.Kind != "file" || c.Change == observe.Deleted || isDecoy[c.Path] {
			continue
		}
		content := r.peek(c.Path)
		for _, d := range decoys {
			if bytes.Contains(content, []byte(d.Token)) {
				r.rep.Credentials = append(r.rep.Credentials, report.Credential{Mechanism: policy.CredExfiltrated, Path: d.Path, Access: "written to " + c.Path})
			}
		}
	}
}
