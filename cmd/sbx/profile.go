package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/policy"
)

// errInvalidProfile is what sbx profile validate returns when a file does not pass; the root maps it
// to exit status 1.
var errInvalidProfile = errors.New("invalid profile")

func newProfileCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "profile",
		Short: "List, show, validate profiles and print their JSON Schema",
		Long: `A profile says what a command may do in the sandbox and what it may leave behind.
Built-in profiles are named (default, contract, strict, ...); your own are YAML files.

Examples:
  sbx profile list
  sbx profile show contract            # the resolved YAML, extends merged in
  sbx profile validate ./ci.yaml       # file:line:col errors, exit status 1 when invalid
  sbx profile schema > sbx.schema.json # for editors`,
	}
	cmd.AddCommand(newProfileListCmd(), newProfileShowCmd(), newProfileValidateCmd(), newProfileSchemaCmd())
	return cmd
}

func newProfileListCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:     "list",
		Short:   "List the built-in profiles with what each is for",
		Example: "  sbx profile list\n  sbx profile list --json | jq -r '.[].name'",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return profileList(c.OutOrStdout(), asJSON)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "write a JSON list of {name, description} instead of a table")
	return c
}

// builtinProfile is one entry of profile list --json.
type builtinProfile struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

func builtinProfiles() ([]builtinProfile, error) {
	out := []builtinProfile{}
	for _, name := range policy.Builtins() {
		p, err := policy.Load(name)
		if err != nil {
			return nil, fmt.Errorf("built-in profile %s: %w", name, err)
		}
		out = append(out, builtinProfile{Name: name, Description: p.Description})
	}
	return out, nil
}

func profileList(w io.Writer, asJSON bool) error {
	list, err := builtinProfiles()
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, "-", "the profile list", list)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, p := range list {
		fmt.Fprintf(tw, "%s\t%s\n", p.Name, p.Description)
	}
	return tw.Flush()
}

func newProfileShowCmd() *cobra.Command {
	return &cobra.Command{
		ValidArgsFunction: completeProfileArg,
		Use:               "show NAME|FILE",
		Short:             "Print a profile as YAML, resolved through extends",
		Example: `  sbx profile show default
  sbx profile show ./my-profile.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return profileShow(c.OutOrStdout(), args[0])
		},
	}
}

func profileShow(w io.Writer, nameOrPath string) error {
	p, err := policy.Load(nameOrPath)
	if err != nil {
		return err
	}
	text, err := p.Marshal()
	if err != nil {
		return fmt.Errorf("writing profile %s: %w", nameOrPath, err)
	}
	_, err = w.Write(text)
	return err
}

func newProfileValidateCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "validate FILE...",
		Short:   "Check profiles; print FILE: ok or the error with its line and column",
		Example: `  sbx profile validate profiles/*.yaml`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return profileValidate(c.OutOrStdout(), c.ErrOrStderr(), args)
		},
	}
}

// profileValidate loads every file, printing "FILE: ok" on out or the error and its hint on errw; it
// returns an error wrapping errInvalidProfile when any file is invalid.
func profileValidate(out, errw io.Writer, files []string) error {
	bad := 0
	for _, file := range files {
		_, err := policy.Load(file)
		if err == nil {
			fmt.Fprintf(out, "%s: ok\n", file)
			continue
		}
		bad++
		if !strings.HasPrefix(err.Error(), file) {
			err = fmt.Errorf("%s: %w", file, err)
		}
		// Only the profile's own hint: validate reads files and builds nothing.
		printError(errw, err, policy.Hint(err))
	}
	if bad > 0 {
		return fmt.Errorf("%w: %d of %d", errInvalidProfile, bad, len(files))
	}
	return nil
}

func newProfileSchemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema (draft 2020-12) of profile files, for editors",
		Example: `  sbx profile schema > sbx.schema.json
  # then, at the top of a profile: # yaml-language-server: $schema=./sbx.schema.json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return writeOutput(c.OutOrStdout(), "-", "the profile schema", policy.Schema())
		},
	}
}
