package main

import (
	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/report"
)

func newReportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Print the JSON Schema of the report (sbx.report/v1)",
		Long: `The report (sbx exec --json) is a stable JSON contract: fields may be added, never removed
or renamed, and lists are never null.

Examples:
  sbx report schema > sbx.report.schema.json`,
	}
	cmd.AddCommand(newReportSchemaCmd())
	return cmd
}

func newReportSchemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "schema",
		Short:   "Print the JSON Schema (draft 2020-12) of the report that sbx exec --json writes",
		Example: "  sbx report schema > sbx.report.schema.json",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			b := report.MarshalSchema()
			return writeOutput(c.OutOrStdout(), "-", "the report schema", b)
		},
	}
}
