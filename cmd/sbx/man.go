package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

func newManCmd(io stdio) *cobra.Command {
	var dir string
	c := &cobra.Command{
		Use:   "man",
		Short: "Write man pages for sbx and every subcommand (section 1)",
		Long: `man writes troff man pages, one per command (sbx.1, sbx-exec.1, sbx-profile-list.1, ...), generated
from the same help text as --help.

Examples:
  sbx man -o /usr/local/share/man/man1
  sbx man -o man && man ./man/sbx-exec.1`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("creating %s: %w", dir, err)
			}
			root := c.Root()
			root.DisableAutoGenTag = true // no date: the pages are the same for the same sbx
			header := &doc.GenManHeader{Title: "SBX", Section: "1", Source: "sbx " + buildVersion(), Manual: "sbx manual"}
			if err := doc.GenManTree(root, header, dir); err != nil {
				return fmt.Errorf("writing man pages to %s: %w", dir, err)
			}
			fmt.Fprintf(io.err, "sbx: man pages written to %s\n", dir)
			return nil
		},
	}
	c.Flags().StringVarP(&dir, "output", "o", "man", "write the pages into `DIR`")
	return c
}
