package runner

import (
	"strconv"

	"github.com/sbx-dev/sbx/report"
)

// Result wraps a report for assertions.
type Result struct{ Report *report.Report }

func itoa(i int) string { return strconv.Itoa(i) }
