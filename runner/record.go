package runner

import (
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/observe"
	"github.com/sbx-dev/sbx/policy"
)

// maxContentPeek bounds what persistence rules read of a changed file (core.hooksPath in .git/config).
const maxContentPeek = 64 << 10

// judge gathers what the sandbox refused (sbx's own records merged with the kernel's audit records),
// names the persistence the command planted or tried, and compares the run with the plan.
func (r *run) judge() {
	own := r.sb.Denials()
	if own.Lost > 0 {
		// A record dropped could be the one that names persistence: the run was not fully observed.
		r.rep.MarkIncomplete("refused attempts", fmt.Errorf("%d distinct records of sbx's own recording over its bound dropped", own.Lost))
	}
	if c := own.Recorder; c != nil && c.Unresolved+c.OverBudget > 0 {
		// A write sbx could not resolve as the kernel does may be the one that plants persistence.
		r.rep.MarkIncomplete("refused attempts", fmt.Errorf("%d writes sbx's own recording could not resolve as the kernel does and %d it did not read past its CPU budget (listed in denials.writes with the reason)", c.Unresolved, c.OverBudget))
	}
	r.rep.Denials = observe.MergeDenials(own, r.stopDenials())
	policy.FindPersistence(r.rep, r.peek)
	r.credentialsSent()
	policy.Compare(r.opts.Plan.Expect, r.rep)
}

// peek reads the start of a file the command changed, from the writable layer (or writable share) that
// holds it, through a root handle that cannot leave the layer and without following a link the command
// planted; "" for anything that is not a regular file.
func (r *run) peek(p string) []byte {
	for _, sh := range r.sb.Shares() { // a writable share's persistence files (shares.go)
		if rel, ok := strings.CutPrefix(p, strings.TrimSuffix(sh.Sandbox, "/")+"/"); ok && sh.Writable {
			return readInRoot(sh.Host, path.Clean(rel))
		}
	}
	layers := r.layers()
	for i := len(layers) - 1; i >= 0; i-- { // the working directory's layer, then the root's
		l := layers[i]
		if rel, ok := strings.CutPrefix(p, strings.TrimSuffix(l.At, "/")+"/"); ok {
			return readInRoot(l.Upper, path.Clean(rel))
		}
	}
	return nil
}

func readInRoot(dir, rel string) []byte {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil
	}
	defer root.Close()
	f, err := root.OpenFile(rel, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(f, maxContentPeek))
	return b
}
