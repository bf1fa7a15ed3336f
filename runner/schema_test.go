package runner

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/report/schema"
)

// runValid is Run for the tests: every report a test gets is first checked against the report's JSON Schema.
func runValid(t *testing.T, ctx context.Context, o Options) (*report.Report, error) {
	t.Helper()
	return valid(t)(Run(ctx, o))
}

// valid returns a pass-through for a run's results that fails the test when the report does not
// validate against the report's JSON Schema (`sbx report schema`).
func valid(t *testing.T) func(*report.Report, error) (*report.Report, error) {
	t.Helper()
	return func(rep *report.Report, err error) (*report.Report, error) {
		t.Helper()
		if rep == nil {
			return rep, err
		}
		b, merr := json.Marshal(rep)
		if merr != nil {
			t.Fatalf("encoding the report: %v", merr)
		}
		if verr := schema.Validate(b); verr != nil {
			t.Errorf("%v\n%s", verr, b)
		}
		return rep, err
	}
}
