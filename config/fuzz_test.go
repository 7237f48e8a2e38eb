package config_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/localcloud/localcloud/config"
)

// FuzzParse checks that no input makes Parse panic, that every answer is
// either a well-formed stack or a well-formed list of problems, that the
// answer is the same twice, that Parse writes nothing, and that an accepted
// stack keeps every relative binding path inside dataDir and no two
// bindings sharing or nesting a folder.
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
		"version: 1\nname: shop\ndataDir: \"a\\0b\"\n",
		hdr + "  a:\n    type: kv\n    path: \"q\\0\"\n",
		"version: 1\nname: shop\ndataDir: ../../up\nbindings:\n  a:\n    type: kv\n    path: x/../../../y\n",
		"version: 1\nname: shop\nnotify:\n  listen: 0.0.0.0:0\n",
		"version: 1\nname: shop\nnotify:\n  listen: \"[::]:4222\"\n  token: \"\"\n",
		hdr + "  a:\n    type: kv\n    engine: jetstream\n    replicas: 1\n  b:\n    type: queue\n    engine: jetstream\n    maxAttempts: 2\n    deadLetter: c\n  c:\n    type: queue\n    engine: jetstream\n",
		"version: 1\nname: shop\njetstream:\n  servers: [nats://a:4222, tls://b]\n  token: ${TOKEN}\n  creds: c.creds\n  tls: {ca: ca.pem}\nbindings:\n  a: {type: kv, engine: jetstream, replicas: 5}\n",
		"a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nversion: *c\nname: *c\nbindings: *c\n",
	} {
		f.Add([]byte(seed))
	}
	problemRE := regexp.MustCompile(`^(fuzz\.yaml:)?(\d+:(\d+:)?)? ?`)
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		env := envOf(map[string]string{"TOKEN": "t", "HOME": "/home/u"})
		s, err := config.Parse(bytes.NewReader(data), "fuzz.yaml", dir, config.WithLookupEnv(env))
		if ents, rerr := os.ReadDir(dir); rerr != nil || len(ents) != 0 {
			t.Fatalf("Parse wrote into its base folder: %v, %v", ents, rerr)
		}
		s2, err2 := config.Parse(bytes.NewReader(data), "fuzz.yaml", dir, config.WithLookupEnv(env))
		if !reflect.DeepEqual(s, s2) || fmt.Sprint(err) != fmt.Sprint(err2) {
			t.Fatalf("two parses differ:\n%+v, %v\n%+v, %v", s, err, s2, err2)
		}
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
			if b.Engine == config.EngineJetStream {
				// No folder; replicas in range, 1 on the embedded server.
				if b.Path != "" || b.Replicas < config.ReplicasMin || b.Replicas > config.ReplicasMax ||
					(!s.JetStream.External() && b.Replicas != 1) {
					t.Fatalf("bad jetstream binding %+v", b)
				}
				continue
			}
			if b.Engine != config.EngineSQLite || b.Replicas != 0 {
				t.Fatalf("bad engine %+v", b)
			}
			if b.Type != config.TypeKV && b.Type != config.TypeQueue || !filepath.IsAbs(b.Path) || b.Path == s.DataDir {
				t.Fatalf("bad binding %+v", b)
			}
			if b.Type == config.TypeQueue && (b.VisibilityTimeout < config.VisibilityTimeoutMin || b.VisibilityTimeout > config.VisibilityTimeoutMax) {
				t.Fatalf("bad visibility timeout %+v", b)
			}
			if (b.MaxAttempts == 0) != (b.DeadLetter == "") {
				t.Fatalf("maxAttempts without deadLetter or the reverse: %+v", b)
			}
			if strings.ContainsRune(b.Path, 0) || strings.ContainsRune(s.DataDir, 0) {
				t.Fatalf("a path with a NUL byte was accepted: %+v", b)
			}
			if !b.AbsolutePathGiven && !strings.HasPrefix(b.Path, s.DataDir+string(filepath.Separator)) {
				t.Fatalf("relative path of %s left dataDir %s: %s", b.Name, s.DataDir, b.Path)
			}
		}
		for _, srv := range s.JetStream.Servers {
			if !strings.HasPrefix(srv, "nats://") && !strings.HasPrefix(srv, "tls://") || strings.Contains(srv, "@") {
				t.Fatalf("bad jetstream server %q accepted", srv)
			}
		}
		if tok := s.JetStream.TokenEnv; tok != "" && !regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString(tok) {
			t.Fatalf("tokenEnv %q is not a variable name", tok)
		}
		for i, a := range s.Bindings {
			if a.Engine == config.EngineJetStream {
				continue
			}
			for _, b := range s.Bindings[i+1:] {
				if b.Engine == config.EngineJetStream {
					continue
				}
				if a.Path == b.Path || strings.HasPrefix(a.Path, b.Path+"/") || strings.HasPrefix(b.Path, a.Path+"/") {
					t.Fatalf("bindings %s (%s) and %s (%s) share or nest a folder", a.Name, a.Path, b.Name, b.Path)
				}
			}
		}
	})
}

// TestFlowDepthLimit checks the guard that keeps deep [ ] and { } nests
// away from yaml.v3, whose time is quadratic in the depth: 101 levels are
// refused naming the limit, the depth and the line; brackets in quoted
// scalars and comments do not count.
func TestFlowDepthLimit(t *testing.T) {
	t.Parallel()
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	_, err := parseIn(t, t.TempDir(), "version: 1\nname: shop\n\nx: "+deep(101)+"\n")
	wantProblems(t, err, "4:0: : [ ] and { } nest 101 levels deep, more than the limit of 100; a stack file needs 3")

	// Garbage is reported as such, not by its depth.
	_, err = parseIn(t, t.TempDir(), "version: 1\nname: shop\nx: "+deep(101)+"\n\x00")
	wantProblems(t, err, "4:0: : invalid YAML: control character 0x00 is not allowed")

	// Also when the nest is shallow: yaml.v3 alone would only say
	// "control characters are not allowed", naming neither byte nor line.
	_, err = parseIn(t, t.TempDir(), "version: 1\nname: shop\nx: [1]\n\x7f")
	wantProblems(t, err, "4:0: : invalid YAML: control character 0x7f is not allowed")
	_, err = parseIn(t, t.TempDir(), "version: 1\nname: shop\n\nx: \xff\n")
	wantProblems(t, err, "4:0: : invalid YAML: byte 0xff is not UTF-8")

	_, err = parseIn(t, t.TempDir(), "version: 1\nname: shop\nx: "+deep(100)+"\n")
	wantProblems(t, err, "3:1: x: unknown field")

	// Garbage is reported as such however shallow its brackets (an
	// executable's first bytes, "\x7fELF", have few or many by chance).
	_, err = parseIn(t, t.TempDir(), "\x7fELF\x02\x01\x01 version: 1\n")
	wantProblems(t, err, "1:0: : invalid YAML: control character 0x7f is not allowed")

	brackets := strings.Repeat("[{", 200)
	s := mustParse(t, t.TempDir(), "version: 1\nname: shop # "+brackets+"\nnotify:\n  listen: 127.0.0.1:0\n  token: \"\\\""+brackets+"\"\n  # "+brackets+"\nbindings:\n  q:\n    type: queue\n    path: '"+brackets+"'\n")
	if s.Notify.Token != `"`+brackets || binding(t, s, "q").Path != filepath.Join(s.DataDir, brackets) {
		t.Errorf("token %q, path %q", s.Notify.Token, binding(t, s, "q").Path)
	}
}
