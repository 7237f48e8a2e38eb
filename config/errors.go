package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Sentinel errors.
var (
	// ErrInvalid is matched by every [*Errors]: the stack file was read but
	// breaks one or more rules.
	ErrInvalid = errors.New("invalid stack file")
)

// Problem is one mistake in a stack file.
type Problem struct {
	// File is the stack file as named by the caller; "" if none was given.
	File string
	// Line and Col are 1-based; 0 when unknown (some YAML syntax errors give
	// a line only).
	Line, Col int
	// Field is the dotted path of the field, such as
	// bindings.orders.maxAttempts; "" for a problem with the file as a whole.
	Field string
	// Msg says what is wrong, with the limit and the value found. It never
	// contains a newline.
	Msg string
}

// String formats the problem as file:line:col: field: msg, leaving out the
// parts that are empty or zero.
func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		b.WriteString(":")
	}
	if p.Line > 0 {
		fmt.Fprintf(&b, "%d:", p.Line)
		if p.Col > 0 {
			fmt.Fprintf(&b, "%d:", p.Col)
		}
	}
	if b.Len() > 0 {
		b.WriteString(" ")
	}
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Errors lists every problem found in a stack file, in file order. It matches
// [ErrInvalid] under [errors.Is].
type Errors struct {
	Problems []Problem
}

// Error prints one problem per line.
func (e *Errors) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns [ErrInvalid].
func (e *Errors) Unwrap() error { return ErrInvalid }

func newErrors(probs []Problem) *Errors {
	out := make([]Problem, len(probs))
	copy(out, probs)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Line != out[j].Line {
			return out[i].Line < out[j].Line
		}
		return out[i].Col < out[j].Col
	})
	return &Errors{Problems: out}
}
