// Package schema generates and checks the JSON Schema of the sbx.report/v1 report (report/schema.json),
// from the types of package report, so that it cannot drift from what sbx writes.
package schema

import (
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sbx-dev/sbx/report"
)

// report/schema.json is the report's JSON Schema as Marshal gives it, committed for tools that read the
// contract without running sbx, and embedded in sbx (report.MarshalSchema). TestSchemaFile fails when
// it is stale; go generate ./report/schema writes it again.
//go:generate go run ../internal/schemagen ../schema.json

// JSONSchema returns the JSON Schema (draft 2020-12) of a report, generated from the types of package
// report, so that it cannot drift from what sbx writes. It states the report's contract: every
// field without omitempty is required, every list is an array (never null), and objects may carry
// fields the schema does not name (fields may be added, never removed or renamed).
func JSONSchema() (*jsonschema.Schema, error) {
	s, err := jsonschema.For[report.Report](&jsonschema.ForOptions{
		TypeSchemas: map[reflect.Type]*jsonschema.Schema{
			reflect.TypeFor[time.Time](): {Type: "string", Format: "date-time"},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("generating the report's JSON Schema: %w", err)
	}
	s.Schema = "https://json-schema.org/draft/2020-12/schema"
	s.ID = report.SchemaID
	s.Title = report.Schema
	s.Properties["schema"].Const = jsonschema.Ptr[any](report.Schema)
	contract(s)
	return s, nil
}

// contract turns what the generator assumes of any Go value into what a report promises: a list is
// never null (FillLists), and an object may gain fields.
func contract(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) == 2 && s.Types[0] == "null" && s.Types[1] == "array" {
		s.Types, s.Type = nil, "array"
	}
	if s.Type == "object" && s.Properties != nil {
		s.AdditionalProperties = nil
	}
	for _, p := range s.Properties {
		contract(p)
	}
	contract(s.Items)
}

// Marshal returns the report's JSON Schema, indented, as report/schema.json holds it.
func Marshal() ([]byte, error) {
	s, err := JSONSchema()
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the report's JSON Schema: %w", err)
	}
	return append(b, '\n'), nil
}

// Validate checks a report, as JSON, against the report's JSON Schema.
func Validate(doc []byte) error {
	s, err := JSONSchema()
	if err != nil {
		return err
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return fmt.Errorf("resolving the report's JSON Schema: %w", err)
	}
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return fmt.Errorf("decoding the report: %w", err)
	}
	if err := rs.Validate(v); err != nil {
		return fmt.Errorf("validating the report against %s: %w", report.SchemaID, err)
	}
	return nil
}
