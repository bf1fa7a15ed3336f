//go:build nomcp

package main

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/internal/selfexe"
)

// mcpName is the file name of the MCP server's binary, next to sbx's own (make build puts it there):
// sbx whole, built without the tag nomcp.
const mcpName = "sbx-mcp"

// serveMCP hands sbx mcp over to sbx-mcp: the same command line, environment, descriptors and pid
// (execve), so an MCP client that started sbx talks to sbx-mcp without knowing. The flags were
// checked already, by the same definitions as sbx-mcp's.
func serveMCP(ctx context.Context, _ stdio, _ mcpFlags) error {
	if ctx.Err() != nil {
		return nil // a signal came before the hand-over: the server would have stopped on it
	}
	self, err := selfexe.Path()
	if err != nil {
		return setupError(fmt.Errorf("finding sbx's own binary: %w", err), "")
	}
	bin, ok := selfexe.Beside(self, mcpName)
	if !ok {
		return setupError(fmt.Errorf("sbx mcp runs the MCP server's binary %s, which is missing or not executable", bin),
			"make build puts bin/sbx-mcp next to bin/sbx; install the three binaries side by side (make install)")
	}
	err = unix.Exec(bin, os.Args, os.Environ())
	return setupError(fmt.Errorf("starting the MCP server's binary %s: %w", bin, err), "")
}
