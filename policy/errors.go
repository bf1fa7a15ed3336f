package policy

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrNotFound: the named built-in profile or the profile file does not exist.
	ErrNotFound = errors.New("profile not found")
	// ErrInvalid: the profile exists but cannot be used (syntax, unknown field, wrong type, a value
	// Validate refuses, an extends cycle). ErrSyntax and ErrCycle also match ErrInvalid.
	ErrInvalid = errors.New("invalid profile")
	// ErrSyntax: the file is not YAML (or not text at all).
	ErrSyntax = fmt.Errorf("%w: syntax", ErrInvalid)
	// ErrCycle: a chain of extends comes back to a profile already in it.
	ErrCycle = fmt.Errorf("%w: extends cycle", ErrInvalid)
)

// Error is one problem with a profile, located in its file. Error() is the one line
// "file:line:col: msg"; Hint, when not empty, tells the user what to do and is printed separately
// (the CLI shows it as "sbx: hint: ...").
type Error struct {
	File string // file name as given, or "builtin:NAME"; "" for errors not tied to a file (flags)
	Line int    // 1-based; 0 when unknown
	Col  int    // 1-based; 0 when unknown
	Msg  string
	Hint string
	Err  error // the sentinel (ErrInvalid, ErrSyntax, ErrCycle, ErrNotFound) or an underlying error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d:%d", e.Line, e.Col)
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the sentinel or underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Hint returns the hint of the first *Error in err's chain, or "".
func Hint(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Hint
	}
	return ""
}

// Pos is where a key or value was written.
type Pos struct {
	File      string
	Line, Col int
}

// errAt builds an *Error at pos.
func errAt(pos Pos, kind error, hint, format string, args ...any) *Error {
	return &Error{File: pos.File, Line: pos.Line, Col: pos.Col, Msg: fmt.Sprintf(format, args...), Hint: hint, Err: kind}
}

// valueError is what a value parser returns; the decoder adds the position and the field path.
type valueError struct {
	msg, hint string
}

func (e *valueError) Error() string { return e.msg }

func badValue(hint, format string, args ...any) error {
	return &valueError{msg: fmt.Sprintf(format, args...), hint: hint}
}

// suggest returns `did you mean "x"?` for the known word closest to got, or "".
func suggest(got string, known []string) string {
	best, bestD := "", 1<<30
	for _, k := range known {
		d := editDistance(strings.ToLower(got), strings.ToLower(k))
		if d < bestD {
			best, bestD = k, d
		}
	}
	limit := 1
	if len(got) >= 5 {
		limit = 2
	}
	if best == "" || bestD > limit {
		return ""
	}
	return fmt.Sprintf("did you mean %q?", best)
}

// editDistance is the Levenshtein distance with adjacent transpositions counted as one edit.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
