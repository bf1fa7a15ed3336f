package report

import (
	"encoding/json"
	"reflect"
)

// MarshalJSON writes the report with every list present: a nil slice anywhere in it (files.details, an
// incomplete exec's argv, a process's fds, ...) is written as [], never null, as the contract promises.
// It is one walk over the value rather than a rule each producer must remember; nil slices of the
// caller's report become empty ones, which changes nothing it could observe but the encoding.
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report // without this method
	p := plain(r)
	emptyLists(reflect.ValueOf(&p).Elem())
	return json.Marshal(p)
}

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
