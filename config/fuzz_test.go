package config_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/localcloud/localcloud/config"
)

// FuzzParse checks that no input makes Parse panic, and that every answer is
// either a well-formed stack or a well-formed list of problems.
func FuzzParse(f *testing.F) {
	if ex, err := os.ReadFile("../examples/stack.yaml"); err == nil {
		f.Add(ex)
	}
	for _, seed := range []string{
		"",
		"version: 1\nname: shop\n",
		hdr + "  carts:\n    type: kv\n  orders:\n    type: queue\n    maxAttempts: 5\n    deadLetter: dlq\n  dlq:\n    type: queue\n",
		hdr + "  a:\n    type: queue\n    maxAttempts: 3\n    deadLetter: b\n  b:\n    type: queue\n    maxAttempts: 3\n    deadLetter: a\n",
		hdr + "  a:\n    type: queue\n    path: ../x\n  b:\n    type: kv\n    path: /tmp\n  c:\n    type: kv\n    path: a/b/../c\n",
		"version: 1\nname: shop\nnotify:\n  listen: \"[::1]:0\"\n  token: ${TOKEN}\n",
		"version: 1\nname: shop\ndataDir: ${HOME}/$${x}/$$\n",
		"version: 1\nname: &a shop\nbindings: &b {x: *b, y: *a}\n",
		"version: 1\nname: shop\nbindings:\n  x:\n    <<: *nope\n",
		"a: &x [*x]\n",
		"- 1\n- 2\n",
		"version: 1\n---\nversion: 2\n",
		"version: !!binary aGVsbG8=\nname: !custom shop\n",
		"version: 1\nname: shop\nbindings:\n  ? [a]\n  : 1\n",
		"{version: 1, name: shop, bindings: {q: {type: queue, visibilityTimeout: 12h, maxAttempts: 1000, deadLetter: r}, r: {type: queue}}}",
		"\tversion: 1",
		"version: 1\nname: shop\nbindings:\n  \"a\\nb\":\n    type: \"kv\\r\\nx\"\n",
	} {
		f.Add([]byte(seed))
	}
	problemRE := regexp.MustCompile(`^(fuzz\.yaml:)?(\d+:(\d+:)?)? ?`)
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		env := envOf(map[string]string{"TOKEN": "t", "HOME": "/home/u"})
		s, err := config.Parse(bytes.NewReader(data), "fuzz.yaml", dir, config.WithLookupEnv(env))
		if err != nil {
			if s != nil {
				t.Fatalf("got a stack and an error: %v", err)
			}
			var errs *config.Errors
			if !errors.As(err, &errs) || !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("error %T %v is not an *Errors matching ErrInvalid", err, err)
			}
			if len(errs.Problems) == 0 {
				t.Fatal("*Errors without problems")
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(errs.Problems) {
				t.Fatalf("Error() has %d lines for %d problems:\n%s", len(lines), len(errs.Problems), err)
			}
			for i, p := range errs.Problems {
				if p.Msg == "" || p.Line < 0 || p.Col < 0 || !problemRE.MatchString(lines[i]) {
					t.Fatalf("bad problem %+v", p)
				}
				if !utf8.ValidString(p.Field) && !strings.Contains(p.Field, "[") {
					t.Fatalf("field %q is neither valid UTF-8 nor quoted", p.Field)
				}
			}
			return
		}
		if s == nil {
			t.Fatal("no stack and no error")
		}
		if s.Version != config.Version || !regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`).MatchString(s.Name) {
			t.Fatalf("bad stack %+v", s)
		}
		if !filepath.IsAbs(s.DataDir) || s.Dir != dir {
			t.Fatalf("DataDir %q, Dir %q", s.DataDir, s.Dir)
		}
		if !sort.SliceIsSorted(s.Bindings, func(i, j int) bool { return s.Bindings[i].Name < s.Bindings[j].Name }) {
			t.Fatalf("bindings not sorted: %+v", s.Bindings)
		}
		for _, b := range s.Bindings {
			if b.Type != config.TypeKV && b.Type != config.TypeQueue || !filepath.IsAbs(b.Path) || b.Path == s.DataDir {
				t.Fatalf("bad binding %+v", b)
			}
			if b.Type == config.TypeQueue && (b.VisibilityTimeout < config.VisibilityTimeoutMin || b.VisibilityTimeout > config.VisibilityTimeoutMax) {
				t.Fatalf("bad visibility timeout %+v", b)
			}
			if (b.MaxAttempts == 0) != (b.DeadLetter == "") {
				t.Fatalf("maxAttempts without deadLetter or the reverse: %+v", b)
			}
		}
	})
}
