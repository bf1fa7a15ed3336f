package report

import (
	_ "embed"
	"slices"
)

// SchemaID is the $id of the report's JSON Schema.
const SchemaID = "https://github.com/sbx-dev/sbx/report.schema.json"

// schemaJSON is the report's JSON Schema (draft 2020-12), generated from the types of this package by
// package report/schema (go generate ./report/schema writes it; a test there fails when it is stale).
// It is committed and embedded rather than generated at run time, so that sbx does not link the
// generator, whose package initialization every run would pay.
//
//go:embed schema.json
var schemaJSON []byte

// MarshalSchema returns the report's JSON Schema, indented, as `sbx report schema` prints it.
func MarshalSchema() []byte { return slices.Clone(schemaJSON) }
