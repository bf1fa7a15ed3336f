package report

import "reflect"

// FillLists makes every list in the report present: a nil slice anywhere in it (files.details, an
// incomplete exec's argv, a process's fds, ...) becomes an empty one, so that the JSON says [] and never
// null, as the contract promises. It is one walk over the whole value rather than a rule each producer
// must remember; the runner calls it on every report it returns. (Not a MarshalJSON method: types that
// embed Report, such as the MCP server's run output, would inherit it and lose their own fields.)
func (r *Report) FillLists() { emptyLists(reflect.ValueOf(r).Elem()) }

// emptyLists sets every nil slice reachable from v (through structs, pointers and slice elements) to an
// empty one. Maps and interfaces are not entered: the report has none that hold lists.
func emptyLists(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			emptyLists(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				emptyLists(f)
			}
		}
	case reflect.Slice:
		if v.IsNil() {
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			return
		}
		for i := range v.Len() {
			emptyLists(v.Index(i))
		}
	}
}
