package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
			if err := writeManTree(c.Root(), dir, "sbx "+buildVersion()); err != nil {
				return fmt.Errorf("writing man pages to %s: %w", dir, err)
			}
			fmt.Fprintf(io.err, "sbx: man pages written to %s\n", dir)
			return nil
		},
	}
	c.Flags().StringVarP(&dir, "output", "o", "man", "write the pages into `DIR`")
	return c
}

// writeManTree writes the page of cmd and of each of its subcommands into dir, named after the command
// path (sbx-profile-list.1). The pages are plain troff written here: cobra's generator would link a
// Markdown renderer into sbx, whose package init every run (and every sandbox's init) pays.
func writeManTree(cmd *cobra.Command, dir, source string) error {
	for _, c := range cmd.Commands() {
		if !c.IsAvailableCommand() || c.IsAdditionalHelpTopicCommand() {
			continue
		}
		if err := writeManTree(c, dir, source); err != nil {
			return err
		}
	}
	name := strings.ReplaceAll(cmd.CommandPath(), " ", "-")
	// Through writeOutput: no link followed to a file (see reportTarget).
	return writeOutput(io.Discard, filepath.Join(dir, name+".1"), "the man page "+name+".1", []byte(manPage(cmd, source)))
}

// manPage is cmd's man page: name, synopsis, description (its long help, indented lines kept as they
// are), options, inherited options and the related pages.
func manPage(cmd *cobra.Command, source string) string {
	var b strings.Builder
	name := strings.ReplaceAll(cmd.CommandPath(), " ", "-")
	fmt.Fprintf(&b, ".nh\n.TH \"SBX\" \"1\" \"\" %s \"sbx manual\"\n", roffQuote(source))
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n", roffEscape(name), roffEscape(cmd.Short))
	fmt.Fprintf(&b, ".SH SYNOPSIS\n\\fB%s\\fP\n", roffEscape(cmd.UseLine()))
	desc := cmd.Long
	if desc == "" {
		desc = cmd.Short
	}
	b.WriteString(".SH DESCRIPTION\n")
	for _, para := range strings.Split(strings.TrimSpace(desc), "\n\n") {
		b.WriteString(".PP\n")
		for _, line := range strings.Split(para, "\n") {
			if strings.HasPrefix(line, " ") {
				// An example or a table: its own line, as written.
				fmt.Fprintf(&b, ".br\n\\&%s\n", roffEscape(line))
				continue
			}
			fmt.Fprintf(&b, "%s\n", roffLine(line))
		}
	}
	manFlags(&b, "OPTIONS", cmd.NonInheritedFlags())
	manFlags(&b, "OPTIONS INHERITED FROM PARENT COMMANDS", cmd.InheritedFlags())
	var see []string
	if cmd.HasParent() {
		see = append(see, strings.ReplaceAll(cmd.Parent().CommandPath(), " ", "-"))
	}
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() && !c.IsAdditionalHelpTopicCommand() {
			see = append(see, strings.ReplaceAll(c.CommandPath(), " ", "-"))
		}
	}
	if len(see) > 0 {
		b.WriteString(".SH SEE ALSO\n")
		for i, s := range see {
			sep := ",\n"
			if i == len(see)-1 {
				sep = "\n"
			}
			fmt.Fprintf(&b, "\\fB%s\\fP(1)%s", roffEscape(s), sep)
		}
	}
	return b.String()
}

// manFlags writes a section of flags, one paragraph each: the names, the value's type or default, and
// the usage.
func manFlags(b *strings.Builder, title string, flags *pflag.FlagSet) {
	if !flags.HasAvailableFlags() {
		return
	}
	fmt.Fprintf(b, ".SH %s\n", title)
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		names := "\\fB\\-\\-" + roffEscape(f.Name) + "\\fP"
		if f.Shorthand != "" && f.ShorthandDeprecated == "" {
			names = "\\fB\\-" + roffEscape(f.Shorthand) + "\\fP, " + names
		}
		varname, usage := pflag.UnquoteUsage(f)
		if varname != "" {
			names += "=\\fI" + roffEscape(varname) + "\\fP"
		}
		fmt.Fprintf(b, ".TP\n%s\n%s", names, roffLine(usage))
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "[]" && f.DefValue != "0" {
			fmt.Fprintf(b, " (default %s)", roffEscape(f.DefValue))
		}
		b.WriteString("\n")
	})
}

// roffEscape makes s literal text for troff: backslashes and hyphens (which troff would typeset as
// hyphens, not as the minus signs options are spelled with).
func roffEscape(s string) string {
	return strings.NewReplacer(`\`, `\e`, "-", `\-`).Replace(s)
}

// roffLine is an escaped line of text, guarded where troff would take it for a request (a leading
// dot or quote).
func roffLine(s string) string {
	s = roffEscape(s)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		return `\&` + s
	}
	return s
}

// roffQuote is s as one quoted argument of a request.
func roffQuote(s string) string {
	return `"` + strings.ReplaceAll(roffEscape(s), `"`, `""`) + `"`
}
