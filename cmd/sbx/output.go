package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sbx-dev/sbx/report"
	"github.com/sbx-dev/sbx/report/ocsf"
)

// writeOutput writes a document to where a flag says: "-" is sbx's stdout, any other value a file,
// created or truncated (mode 0644), and "" nothing. Every flag that writes a document goes through it
// (exec and probe --json, spec and export -o, export --json, the --json of list commands, report
// schema). what names the document in the error.
func writeOutput(stdout io.Writer, path, what string, data []byte) error {
	var err error
	switch path {
	case "":
		return nil
	case "-":
		_, err = stdout.Write(data)
	default:
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", what, err)
	}
	return nil
}

// writeJSON writes v as indented JSON, as writeOutput does.
func writeJSON(stdout io.Writer, path, what string, v any) error {
	if path == "" {
		return nil
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", what, err)
	}
	return writeOutput(stdout, path, what, append(data, '\n'))
}

// writeOCSF writes the report as OCSF events, one JSON object a line, as writeOutput does.
func writeOCSF(stdout io.Writer, path string, rep *report.Report) error {
	host, _ := os.Hostname()
	events := ocsf.Convert(rep, ocsf.Options{Time: time.Now(), Hostname: host, Version: buildVersion()})
	var b bytes.Buffer
	if err := ocsf.WriteLines(&b, events); err != nil {
		return err
	}
	return writeOutput(stdout, path, "the OCSF events", b.Bytes())
}
