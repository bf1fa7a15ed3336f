package policy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"

	"github.com/sbx-dev/sbx/profiles"
)

// maxExtendsDepth bounds a chain of extends.
const maxExtendsDepth = 16

// Builtins returns the names of the built-in profiles, sorted.
func Builtins() []string { return profiles.Names() }

// IsBuiltinName reports whether nameOrPath names a built-in profile rather than a file: a built-in name
// has no "/" and no .yaml or .yml suffix ("default", "strict"; but "./default", "x.yaml" are files).
func IsBuiltinName(nameOrPath string) bool {
	return !strings.Contains(nameOrPath, "/") && !strings.HasSuffix(nameOrPath, ".yaml") && !strings.HasSuffix(nameOrPath, ".yml")
}

// Load reads the built-in profile or file nameOrPath, resolves its extends chain and validates the
// result. The returned profile has Extends "" and every inherited field merged in.
func Load(nameOrPath string) (*Profile, error) { return LoadIn("", nameOrPath) }

// LoadIn is Load with a relative path taken in the directory base ("": the current one); errors and
// the profile's name give the path as it was given.
func LoadIn(base, nameOrPath string) (*Profile, error) {
	p, err := read(base, nameOrPath)
	if err != nil {
		return nil, err
	}
	r, err := Resolve(p)
	if err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}

// read loads one profile without following extends and checks what it can check alone.
func read(base, nameOrPath string) (*Profile, error) {
	file, data, err := readSource(base, nameOrPath)
	if err != nil {
		return nil, err
	}
	p, err := Parse(file, data)
	if err != nil {
		return nil, err
	}
	if err := p.validate(true); err != nil {
		return nil, err
	}
	p.base = base
	return p, nil
}

func readSource(base, nameOrPath string) (file string, data []byte, err error) {
	if IsBuiltinName(nameOrPath) {
		file = "builtin:" + nameOrPath
		data, err = fs.ReadFile(profiles.FS(), nameOrPath+".yaml")
		if err != nil {
			hint := suggest(nameOrPath, Builtins())
			if hint == "" {
				hint = "built-in profiles: " + strings.Join(Builtins(), ", ") + "; a file needs a / or a .yaml suffix (./" + nameOrPath + ".yaml)"
			}
			return file, nil, &Error{Msg: fmt.Sprintf("no built-in profile %q", nameOrPath), Hint: hint, Err: ErrNotFound}
		}
		return file, data, nil
	}
	// Without blocking: a FIFO or a terminal in place of a profile (a file in a directory a command
	// could write) would hold sbx in open(2) for good, deaf to SIGTERM. Only a regular file is read.
	f, err := os.OpenFile(inBase(base, nameOrPath), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nameOrPath, nil, &Error{File: nameOrPath, Msg: "no such file", Hint: "check the path; built-in profiles are named without .yaml (sbx profile list)", Err: ErrNotFound}
	}
	if err != nil {
		return nameOrPath, nil, &Error{File: nameOrPath, Msg: "cannot open: " + unwrapPathError(err), Err: err}
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nameOrPath, nil, &Error{File: nameOrPath, Msg: "not a regular file", Hint: "a profile is a YAML file", Err: ErrInvalid}
	}
	data, err = io.ReadAll(io.LimitReader(f, MaxProfileSize+1))
	if err != nil {
		return nameOrPath, nil, &Error{File: nameOrPath, Msg: "cannot read: " + unwrapPathError(err), Err: err}
	}
	return nameOrPath, data, nil
}

func unwrapPathError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// Resolve follows p's extends chain and returns the merged profile; p is not modified. A built-in
// extends by name; a file extends a name or a path relative to its own directory. Cycles are *Errors
// matching ErrCycle that spell out the chain. Resolve does not Validate the merged result.
func Resolve(p *Profile) (*Profile, error) {
	return resolve(p, []string{identity(p.base, p.file)}, []string{displayName(p.file)})
}

func resolve(p *Profile, ids, names []string) (*Profile, error) {
	if p.Extends == "" {
		return merge(&Profile{}, p), nil
	}
	ref, err := p.extendsRef()
	if err != nil {
		return nil, err
	}
	id, name := identity(p.base, sourceName(ref)), displayName(sourceName(ref))
	if i := slices.Index(ids, id); i >= 0 {
		chain := strings.Join(append(slices.Clone(names[i:]), name), " → ")
		return nil, errAt(p.at("extends"), ErrCycle, "remove one extends from the chain", "extends cycle: %s", chain)
	}
	if len(ids) >= maxExtendsDepth {
		return nil, errAt(p.at("extends"), ErrInvalid, "flatten the profiles", "extends chain is deeper than %d", maxExtendsDepth)
	}
	parent, err := read(p.base, ref)
	if err != nil {
		var pe *Error
		if errors.As(err, &pe) && pe.File == "" || errors.Is(err, ErrNotFound) {
			at := p.at("extends")
			return nil, &Error{File: at.File, Line: at.Line, Col: at.Col, Msg: fmt.Sprintf("extends %q: %s", p.Extends, pe.Msg), Hint: pe.Hint, Err: pe.Err}
		}
		return nil, err
	}
	resolved, err := resolve(parent, append(ids, id), append(names, name))
	if err != nil {
		return nil, err
	}
	return merge(resolved, p), nil
}

// extendsRef is what to read for p.Extends: a built-in name, or a path made relative to p's file.
func (p *Profile) extendsRef() (string, error) {
	ref := p.Extends
	if IsBuiltinName(ref) {
		return ref, nil
	}
	if strings.HasPrefix(p.file, "builtin:") || p.file == "" {
		return "", errAt(p.at("extends"), ErrInvalid, "extend a built-in profile by name", "extends %q: a path is only allowed in a profile file", ref)
	}
	if !filepath.IsAbs(ref) {
		ref = filepath.Join(filepath.Dir(p.file), ref)
	}
	return ref, nil
}

// sourceName is the file name readSource gives ref.
func sourceName(ref string) string {
	if IsBuiltinName(ref) {
		return "builtin:" + ref
	}
	return ref
}

// Files lists the profile files a resolved profile was read from, its own and those it extends (not
// the built-ins, which are part of sbx), as absolute paths. Whoever may write one of them decides the
// profile of the runs that load it next.
func (p *Profile) Files() []string {
	out := slices.Clone(p.sources)
	if f := identity(p.base, p.file); f != "" && !strings.HasPrefix(f, "builtin:") && !slices.Contains(out, f) {
		out = append(out, f)
	}
	return out
}

// inBase is path taken in the directory base ("": as it is).
func inBase(base, path string) string {
	if base == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(base, path)
}

// identity makes two spellings of the same file compare equal; a relative one is taken in base.
func identity(base, file string) string {
	if strings.HasPrefix(file, "builtin:") || file == "" {
		return file
	}
	if abs, err := filepath.Abs(inBase(base, file)); err == nil {
		return abs
	}
	return filepath.Clean(file)
}

func displayName(file string) string {
	if name, ok := strings.CutPrefix(file, "builtin:"); ok {
		return name
	}
	return file
}

// merge returns child laid over parent; neither is modified. The rules are in docs/profiles.md, "extends and the merge rules":
//   - scalars (strings, enums, numbers, booleans, sizes, durations): the child's value wins when set;
//   - lists append, parent first, dropping exact duplicates; filesystem.share entries replace the
//     parent's entry with the same sandbox path; syscalls.allow takes names out of the parent's deny and
//     syscalls.deny takes names out of the parent's allow;
//   - env.set merges key by key, the child winning;
//   - name and description are the child's own; extends is consumed.
func merge(parent, child *Profile) *Profile {
	out := &Profile{}
	mergeValue(reflect.ValueOf(out).Elem(), reflect.ValueOf(parent).Elem())
	inChild := func(list []string) func(string) bool {
		return func(s string) bool { return slices.Contains(list, s) }
	}
	out.Syscalls.Deny = slices.DeleteFunc(out.Syscalls.Deny, inChild(child.Syscalls.Allow))
	out.Syscalls.Allow = slices.DeleteFunc(out.Syscalls.Allow, inChild(child.Syscalls.Deny))
	out.Filesystem.Share = slices.DeleteFunc(out.Filesystem.Share, func(s ShareConfig) bool {
		return slices.ContainsFunc(child.Filesystem.Share, func(c ShareConfig) bool { return c.target() == s.target() })
	})
	mergeValue(reflect.ValueOf(out).Elem(), reflect.ValueOf(child).Elem())
	out.Syscalls.Deny, out.Syscalls.Allow = nilIfEmpty(out.Syscalls.Deny), nilIfEmpty(out.Syscalls.Allow)
	out.Filesystem.Share = nilIfEmpty(out.Filesystem.Share)
	out.Name, out.Description, out.Extends = child.Name, child.Description, ""
	out.file, out.base = child.file, child.base
	out.sources = parent.Files()
	out.pos = map[string]Pos{}
	for _, m := range []map[string]Pos{parent.pos, child.pos} {
		for k, v := range m {
			if !strings.Contains(k, "[") { // list positions no longer line up after appending
				out.pos[k] = v
			}
		}
	}
	return out
}

// mergeValue lays src over dst following merge's rules; dst never shares memory with src afterwards.
func mergeValue(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Struct:
		for i := range src.NumField() {
			if src.Type().Field(i).IsExported() {
				mergeValue(dst.Field(i), src.Field(i))
			}
		}
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		if src.Elem().Kind() != reflect.Struct {
			// A value the profile sets, its zero too (false, 0 = none): what the pointer is for.
			v := reflect.New(src.Type().Elem())
			v.Elem().Set(src.Elem())
			dst.Set(v)
			return
		}
		if dst.IsNil() {
			dst.Set(reflect.New(src.Type().Elem()))
		}
		mergeValue(dst.Elem(), src.Elem())
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		out := reflect.MakeSlice(src.Type(), 0, dst.Len()+src.Len())
		out = reflect.AppendSlice(out, dst)
		for i := range src.Len() {
			if !containsValue(out, src.Index(i)) {
				out = reflect.Append(out, src.Index(i))
			}
		}
		dst.Set(out)
	case reflect.Map:
		if src.IsNil() {
			return
		}
		if dst.IsNil() {
			dst.Set(reflect.MakeMap(src.Type()))
		}
		for it := src.MapRange(); it.Next(); {
			dst.SetMapIndex(it.Key(), it.Value())
		}
	default:
		if !src.IsZero() {
			dst.Set(src)
		}
	}
}

func containsValue(list, v reflect.Value) bool {
	for i := range list.Len() {
		if list.Index(i).Interface() == v.Interface() {
			return true
		}
	}
	return false
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}
