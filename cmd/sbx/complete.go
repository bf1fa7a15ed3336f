package main

import (
	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/policy"
)

// completions registers what the shell completion offers beyond subcommands and flag names: the
// built-in profile names for every -p/--profile (a YAML file name completes too) and the values of
// every flag with a fixed set (--format).
func completions(c *cobra.Command) {
	if c.Flags().Lookup("profile") != nil {
		_ = c.RegisterFlagCompletionFunc("profile", completeProfileArg)
	}
	if c.Flags().Lookup("format") != nil {
		_ = c.RegisterFlagCompletionFunc("format", cobra.FixedCompletions(reportFormats, cobra.ShellCompDirectiveNoFileComp))
	}
	for _, sub := range c.Commands() {
		completions(sub)
	}
}

// completeProfileArg offers the built-in profile names; the shell completes file names as well, for
// profiles kept in YAML files.
func completeProfileArg(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return policy.Builtins(), cobra.ShellCompDirectiveDefault
}
