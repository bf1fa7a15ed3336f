package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// MaxProfileSize bounds a profile file; a larger file is refused before it is parsed.
const MaxProfileSize = 1 << 20

// Parse decodes one profile file without following extends and without Validate. file names the
// source in errors. Unknown fields, duplicate keys, wrong types and unknown enum values are *Errors
// carrying file:line:column; no input makes Parse panic.
func Parse(file string, data []byte) (p *Profile, err error) {
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, &Error{File: file, Msg: fmt.Sprintf("cannot parse: %v", r), Err: ErrSyntax}
		}
	}()
	root, err := parseYAML(file, data)
	if err != nil {
		return nil, err
	}
	d := &decoder{file: file, pos: map[string]Pos{}}
	p = &Profile{file: file}
	if err := d.decodeValue(root, reflect.ValueOf(p).Elem(), ""); err != nil {
		return nil, err
	}
	p.pos = d.pos
	if err := p.checkVersion(); err != nil {
		return nil, err
	}
	if p.Name == "" {
		p.Name = stem(file)
	}
	return p, nil
}

func (p *Profile) checkVersion() error {
	if _, ok := p.pos["version"]; !ok {
		return errAt(Pos{File: p.file, Line: 1, Col: 1}, ErrInvalid, "add version: 1 as the first line", "version is missing")
	}
	if p.Version != 1 {
		return errAt(p.at("version"), ErrInvalid, "this sbx reads version: 1", "version %d is not supported", p.Version)
	}
	return nil
}

// stem is the file name without directory and .yaml/.yml suffix ("builtin:x" → "x").
func stem(file string) string {
	if name, ok := strings.CutPrefix(file, "builtin:"); ok {
		return name
	}
	base := filepath.Base(file)
	for _, ext := range []string{".yaml", ".yml"} {
		base = strings.TrimSuffix(base, ext)
	}
	return base
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseYAML returns the root mapping node of the single document in data.
func parseYAML(file string, data []byte) (*yaml.Node, error) {
	if len(data) > MaxProfileSize {
		return nil, &Error{File: file, Msg: fmt.Sprintf("profile is larger than %s", FormatSize(MaxProfileSize)), Err: ErrInvalid}
	}
	if pos, ok := binaryAt(data); !ok {
		return nil, &Error{File: file, Line: pos.Line, Col: pos.Col, Msg: "not a text file (binary or invalid UTF-8 content)",
			Hint: "a profile is a YAML text file; see sbx profile show default", Err: ErrSyntax}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, emptyProfile(file)
		}
		return nil, yamlError(file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		if err != nil {
			return nil, yamlError(file, err)
		}
		return nil, &Error{File: file, Line: line, Col: 1, Msg: "more than one YAML document", Hint: "a profile file holds one document: remove the ---", Err: ErrSyntax}
	}
	if len(doc.Content) == 0 || doc.Content[0].ShortTag() == "!!null" {
		return nil, emptyProfile(file)
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: file, Line: root.Line, Col: root.Column, Msg: "a profile is a mapping of sections, found " + describe(root),
			Hint: "start with version: 1; see sbx profile show default", Err: ErrInvalid}
	}
	return root, nil
}

func emptyProfile(file string) error {
	return &Error{File: file, Msg: "empty profile", Hint: "start with version: 1; see sbx profile show default", Err: ErrInvalid}
}

// binaryAt reports the position of the first byte that cannot be in a YAML text file.
func binaryAt(data []byte) (Pos, bool) {
	line, col := 1, 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if (r == utf8.RuneError && size == 1) || (r < 0x20 && r != '\n' && r != '\r' && r != '\t') {
			return Pos{Line: line, Col: col}, false
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		i += size
	}
	return Pos{}, true
}

func yamlError(file string, err error) error {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{File: file, Line: line, Col: 1, Msg: m[2], Hint: "check indentation and quoting near this line", Err: ErrSyntax}
	}
	return &Error{File: file, Msg: strings.TrimPrefix(msg, "yaml: "), Err: ErrSyntax}
}

// nodeUnmarshaler is implemented by the scalar types of the schema (enums, sizes, listeners).
type nodeUnmarshaler interface {
	unmarshalNode(n *yaml.Node) error
}

// decoder walks a yaml.Node tree into the schema structs, recording where every field was written.
type decoder struct {
	file string
	pos  map[string]Pos
}

func (d *decoder) posOf(n *yaml.Node) Pos { return Pos{File: d.file, Line: n.Line, Col: n.Column} }

// wrap turns a value parser's error into an *Error at n naming the field path.
func (d *decoder) wrap(n *yaml.Node, path string, err error) error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		return err
	}
	msg, hint := err.Error(), ""
	var ve *valueError
	if errors.As(err, &ve) {
		hint = ve.hint
	}
	if path != "" {
		msg = path + ": " + msg
	}
	return errAt(d.posOf(n), ErrInvalid, hint, "%s", msg)
}

func (d *decoder) fail(n *yaml.Node, path, hint, format string, args ...any) error {
	return d.wrap(n, path, badValue(hint, format, args...))
}

var netRuleType = reflect.TypeFor[NetRule]()

func structValue(ptr any) reflect.Value { return reflect.ValueOf(ptr).Elem() }

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// decodeValue decodes n into v (addressable). A null leaves v at its zero value ("not set").
func (d *decoder) decodeValue(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return d.fail(n, path, "write the value out in full", "anchors and aliases are not supported in profiles")
	}
	if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		return d.fail(n, path, "remove the tag", "YAML tag %q is not supported", n.Tag)
	}
	if isNull(n) {
		v.SetZero()
		return nil
	}
	if v.Type() == netRuleType {
		return d.decodeNetRule(n, v.Addr().Interface().(*NetRule), path)
	}
	if u, ok := v.Addr().Interface().(nodeUnmarshaler); ok {
		return d.wrap(n, path, u.unmarshalNode(n))
	}
	switch v.Kind() {
	case reflect.Pointer:
		nv := reflect.New(v.Type().Elem())
		if err := d.decodeValue(n, nv.Elem(), path); err != nil {
			return err
		}
		v.Set(nv)
		return nil
	case reflect.Struct:
		return d.decodeStruct(n, v, path)
	case reflect.Slice:
		return d.decodeSlice(n, v, path)
	case reflect.Map:
		return d.decodeMap(n, v, path)
	}
	return d.decodeScalar(n, v, path)
}

func (d *decoder) decodeScalar(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.ScalarNode {
		return d.fail(n, path, "", "expected a single value, found %s", describe(n))
	}
	tag := n.ShortTag()
	switch v.Kind() {
	case reflect.String:
		v.SetString(n.Value)
		return nil
	case reflect.Bool:
		var b bool
		if tag != "!!bool" || n.Decode(&b) != nil {
			return d.fail(n, path, "use true or false", "expected true or false, found %s", describe(n))
		}
		v.SetBool(b)
		return nil
	case reflect.Int, reflect.Int64:
		var x int64
		if tag != "!!int" {
			return d.fail(n, path, "", "expected a whole number, found %s", describe(n))
		}
		if n.Decode(&x) != nil || v.OverflowInt(x) {
			return d.fail(n, path, "", "number %s is out of range", n.Value)
		}
		v.SetInt(x)
		return nil
	case reflect.Float64:
		var f float64
		if (tag != "!!float" && tag != "!!int") || n.Decode(&f) != nil {
			return d.fail(n, path, "", "expected a number, found %s", describe(n))
		}
		v.SetFloat(f)
		return nil
	}
	return d.fail(n, path, "", "cannot decode into %s", v.Type())
}

func (d *decoder) decodeSlice(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.SequenceNode {
		hint := ""
		if n.Kind == yaml.ScalarNode {
			hint = fmt.Sprintf("write a list: [%s]", n.Value)
		}
		return d.fail(n, path, hint, "expected a list, found %s", describe(n))
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		d.pos[ip] = d.posOf(item)
		if err := d.decodeValue(item, s.Index(i), ip); err != nil {
			return err
		}
	}
	v.Set(s)
	return nil
}

func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.MappingNode {
		return d.fail(n, path, "write NAME: value pairs, one per line", "expected a mapping, found %s", describe(n))
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		name, err := d.key(k, seen, path)
		if err != nil {
			return err
		}
		kp := path + "." + name
		d.pos[kp] = d.posOf(k)
		ev := reflect.New(v.Type().Elem()).Elem()
		if err := d.decodeValue(val, ev, kp); err != nil {
			return err
		}
		m.SetMapIndex(reflect.ValueOf(name), ev)
	}
	v.Set(m)
	return nil
}

// key checks a mapping key: a plain scalar not seen before in the same mapping.
func (d *decoder) key(k *yaml.Node, seen map[string]*yaml.Node, path string) (string, error) {
	if k.Kind != yaml.ScalarNode || k.Anchor != "" {
		return "", d.fail(k, path, "", "keys must be plain names, found %s", describe(k))
	}
	if first, dup := seen[k.Value]; dup {
		return "", d.fail(k, path, "remove one of them", "duplicate key %q (first at line %d)", k.Value, first.Line)
	}
	seen[k.Value] = k
	return k.Value, nil
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) error {
	info := fieldsOf(v.Type())
	if n.Kind != yaml.MappingNode {
		return d.fail(n, path, "its fields are: "+strings.Join(info.names, ", "), "expected a mapping, found %s", describe(n))
	}
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		name, err := d.key(k, seen, path)
		if err != nil {
			return err
		}
		idx, ok := info.index[name]
		if !ok {
			return d.unknownField(k, name, path, info.names)
		}
		fp := name
		if path != "" {
			fp = path + "." + name
		}
		d.pos[fp] = d.posOf(k)
		if err := d.decodeValue(val, v.Field(idx), fp); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) unknownField(k *yaml.Node, name, path string, known []string) error {
	hint := suggest(name, known)
	where := "a profile"
	if path != "" {
		where = path
	}
	if hint == "" {
		hint = fmt.Sprintf("%s takes: %s", where, strings.Join(known, ", "))
	}
	msg := fmt.Sprintf("unknown field %q", name)
	if path != "" {
		msg += " in " + path
	}
	return errAt(d.posOf(k), ErrInvalid, hint, "%s", msg)
}

// structFields maps the yaml names of a struct's fields to their index.
type structFields struct {
	index map[string]int
	names []string // in declaration order
}

var fieldCache sync.Map // reflect.Type → *structFields

func fieldsOf(t reflect.Type) *structFields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*structFields)
	}
	f := &structFields{index: map[string]int{}}
	for i := range t.NumField() {
		sf := t.Field(i)
		name := yamlName(sf)
		if name == "" {
			continue
		}
		f.index[name] = i
		f.names = append(f.names, name)
	}
	fieldCache.Store(t, f)
	return f
}

// yamlName is the yaml key of an exported field, or "" for fields the schema does not have.
func yamlName(sf reflect.StructField) string {
	if !sf.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}
