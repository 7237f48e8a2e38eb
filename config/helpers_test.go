package config_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/config"
)

// noEnv is a lookup in which no variable is set.
func noEnv(string) (string, bool) { return "", false }

// envOf returns a lookup over m, so tests never touch the process environment.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// parseIn parses src as stack.yaml in dir.
func parseIn(t *testing.T, dir, src string, opts ...config.Option) (*config.Stack, error) {
	t.Helper()
	if len(opts) == 0 {
		opts = []config.Option{config.WithLookupEnv(noEnv)}
	}
	return config.Parse(strings.NewReader(src), "stack.yaml", dir, opts...)
}

// problems returns err's problems as "line:col: field: msg", failing the test
// if err is not an *config.Errors.
func problems(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		t.Fatal("got no error, want problems")
	}
	var errs *config.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("got %T %v, want *config.Errors", err, err)
	}
	if !errors.Is(err, config.ErrInvalid) {
		t.Errorf("errors.Is(err, ErrInvalid) = false for %v", err)
	}
	var out []string
	for _, p := range errs.Problems {
		if p.File != "stack.yaml" {
			t.Errorf("problem %v names file %q, want stack.yaml", p, p.File)
		}
		out = append(out, fmt.Sprintf("%d:%d: %s: %s", p.Line, p.Col, p.Field, p.Msg))
	}
	return out
}

// wantProblems checks that err lists exactly one problem per want, in order,
// each starting with its want ("line:col: field: start of msg").
func wantProblems(t *testing.T, err error, want ...string) {
	t.Helper()
	got := problems(t, err)
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasPrefix(got[i], want[i])
	}
	if !ok {
		t.Errorf("problems:\n\t%s\nwant (prefixes):\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

func mustParse(t *testing.T, dir, src string, opts ...config.Option) *config.Stack {
	t.Helper()
	s, err := parseIn(t, dir, src, opts...)
	if err != nil {
		t.Fatalf("Parse:\n%v", err)
	}
	if s == nil {
		t.Fatal("Parse returned a nil stack and no error")
	}
	return s
}

func binding(t *testing.T, s *config.Stack, name string) *config.Binding {
	t.Helper()
	b, ok := s.Binding(name)
	if !ok {
		t.Fatalf("no binding %q in %+v", name, s.Bindings)
	}
	return b
}
