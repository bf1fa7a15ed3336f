package policy

import (
	"encoding/json"
	"reflect"
)

// SchemaID is the $id of the JSON Schema of profiles.
const SchemaID = "https://github.com/sbx-dev/sbx/profile.schema.json"

// Schema returns a JSON Schema (draft 2020-12) of profile files for editors, generated from the same
// structs the decoder uses, with each field's doc tag as its description.
func Schema() []byte {
	s := schemaOf(reflect.TypeFor[Profile]())
	s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	s["$id"] = SchemaID
	s["title"] = "sbx profile"
	s["required"] = []string{"version"}
	props := s["properties"].(map[string]any)
	props["version"] = map[string]any{"const": 1, "description": "schema version; must be 1"}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		panic(err) // the schema is built from constant types
	}
	return append(b, '\n')
}

type enumType interface{ Values() []string }

var (
	enumIface      = reflect.TypeFor[enumType]()
	sizeType       = reflect.TypeFor[Size]()
	durationType   = reflect.TypeFor[Duration]()
	listenerType   = reflect.TypeFor[Listener]()
	toolchainsType = reflect.TypeFor[Toolchains]()
)

func schemaOf(t reflect.Type) map[string]any {
	switch {
	case t.Implements(enumIface):
		return map[string]any{"type": "string", "enum": reflect.Zero(t).Interface().(enumType).Values()}
	case t == sizeType:
		return map[string]any{"oneOf": []any{
			map[string]any{"type": "integer", "minimum": 0},
			map[string]any{"type": "string", "pattern": `^[0-9]+(\.[0-9]+)?\s*([kKmMgGtT]([iI]?[bB]?)?|[bB])?$`},
		}}
	case t == durationType:
		return map[string]any{"type": "string", "pattern": `^(none|0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$`}
	case t == listenerType:
		return map[string]any{"type": "string", "pattern": `^((tcp|udp):([0-9]{1,5}|\*)|unix:\*)$`}
	case t == toolchainsType:
		return map[string]any{"oneOf": []any{
			map[string]any{"type": "string", "enum": []string{string(ToolchainsAuto), string(ToolchainsNone)}},
			map[string]any{"type": "array", "items": map[string]any{"type": "string", "enum": ToolchainNames}},
		}}
	case t == netRuleType:
		obj := schemaOf(reflect.TypeFor[netRuleMap]())
		obj["properties"].(map[string]any)["port"] = map[string]any{"type": []string{"integer", "string"}, "description": "port number or *"}
		return map[string]any{"oneOf": []any{
			map[string]any{"type": "string", "description": "DEST: [udp:]host:port, ip[:port], [v6]:port, cidr[:port]; port may be a-b or *"},
			obj,
		}}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return schemaOf(t.Elem())
	case reflect.Struct:
		return structSchema(t)
	case reflect.Slice:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem())}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Float64:
		return map[string]any{"type": "number"}
	}
	return map[string]any{"type": "string"}
}

func structSchema(t reflect.Type) map[string]any {
	props := map[string]any{}
	for i := range t.NumField() {
		f := t.Field(i)
		name := yamlName(f)
		if name == "" {
			continue
		}
		s := schemaOf(f.Type)
		if doc := f.Tag.Get("doc"); doc != "" {
			s["description"] = doc
		}
		props[name] = s
	}
	return map[string]any{"type": "object", "properties": props, "additionalProperties": false}
}
