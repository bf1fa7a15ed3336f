package policy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestSchemaCoversEveryField walks the profile structs and checks the schema has each field.
func TestSchemaCoversEveryField(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(Schema(), &schema); err != nil {
		t.Fatal(err)
	}
	if schema["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %v", schema["$schema"])
	}
	var walk func(typ reflect.Type, node map[string]any, path string)
	walk = func(typ reflect.Type, node map[string]any, path string) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
			if items, ok := node["items"].(map[string]any); ok {
				node = items
			}
		}
		if typ.Kind() != reflect.Struct || typ == netRuleType || typ == listenerType {
			return
		}
		props, _ := node["properties"].(map[string]any)
		if node["additionalProperties"] != false {
			t.Errorf("%s: additionalProperties is not false", path)
		}
		for i := range typ.NumField() {
			name := yamlName(typ.Field(i))
			if name == "" {
				continue
			}
			sub, ok := props[name].(map[string]any)
			if !ok {
				t.Errorf("schema lacks %s.%s", path, name)
				continue
			}
			if sub["description"] == nil {
				t.Errorf("%s.%s has no description", path, name)
			}
			walk(typ.Field(i).Type, sub, path+"."+name)
		}
	}
	walk(reflect.TypeFor[Profile](), schema, "profile")
	if !strings.Contains(string(Schema()), `"host"`) {
		t.Error("schema lacks the mapping form of network entries")
	}
}
