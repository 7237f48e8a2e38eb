package kv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
)

func mapLookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestEnvNameMatchesConfig(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"carts", "user-sessions", "a-b-c9"} {
		if got, want := EnvName(n), config.EnvName(n); got != want {
			t.Errorf("EnvName(%q) = %q, config.EnvName = %q", n, got, want)
		}
	}
}

func TestFromEnvErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := []struct {
		name, value string
		set         bool
		want        string
	}{
		{name: "missing", want: "is not set"},
		{name: "empty", set: true, value: " ", want: "is empty"},
		{name: "malformed", set: true, value: `{"service":`, want: "want JSON"},
		{name: "not an object", set: true, value: `"local-kv"`, want: "want JSON"},
		{name: "wrong service", set: true, value: `{"service":"local-queue","queuePath":"` + dir + `"}`, want: `service is "local-queue"`},
		{name: "no dataDir", set: true, value: `{"service":"local-kv"}`, want: "dataDir is missing"},
		{name: "relative dataDir", set: true, value: `{"service":"local-kv","dataDir":"rel/dir"}`, want: "absolute path"},
		{name: "bad durability", set: true, value: `{"service":"local-kv","dataDir":"` + dir + `","durability":"max"}`, want: "durability"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{}
			if c.set {
				env["LOCALCLOUD_BINDING_USER_SESSIONS"] = c.value
			}
			s, err := fromEnv(context.Background(), "user-sessions", mapLookup(env), nil)
			if err == nil {
				s.Close()
				t.Fatal("no error")
			}
			if !errors.Is(err, bindings.ErrBindingSetupFailed) {
				t.Errorf("error %v does not match ErrBindingSetupFailed", err)
			}
			for _, w := range []string{"LOCALCLOUD_BINDING_USER_SESSIONS", c.want} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestFromEnvOpensTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "kv", "carts")
	env := map[string]string{
		"LOCALCLOUD_BINDING_CARTS": `{"service":"local-kv","dataDir":"` + dir + `","durability":"full","extra":1}`,
	}
	provision(t, dir)
	s, err := fromEnv(ctx, "carts", mapLookup(env), []Option{WithDurability(bindings.DurabilityNormal)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if want := filepath.Join(dir, sqlitekv.FileName); s.Path() != want {
		t.Errorf("Path() = %q, want %q", s.Path(), want)
	}
	if _, err := s.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	b, err := readEnv("carts", mapLookup(env))
	if err != nil || b.Durability != "full" || b.DataDir != dir {
		t.Errorf("readEnv = %+v, %v", b, err)
	}
}

func TestFromEnvProcessEnvironment(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LOCALCLOUD_BINDING_CARTS", `{"service":"local-kv","dataDir":"`+dir+`"}`)
	provision(t, dir)
	s, err := FromEnv(context.Background(), "carts")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := ReadEnv("carts"); err != nil {
		t.Fatal(err)
	}
	if _, err := FromEnv(context.Background(), "nope"); err == nil || !strings.Contains(err.Error(), "LOCALCLOUD_BINDING_NOPE") {
		t.Fatalf("FromEnv(nope) = %v", err)
	}
}

// provision creates the store in dir, as the stack's tools do before an
// app's FromEnv.
func provision(t *testing.T, dir string) {
	t.Helper()
	s, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFromEnvCreatesNoStore: a binding whose dataDir names no store (a
// typo, another case) is refused with an error naming the variable, the
// file it looked for and the KV bindings of the environment; nothing is
// created.
func TestFromEnvCreatesNoStore(t *testing.T) {
	root := t.TempDir()
	carts := filepath.Join(root, "kv", "carts")
	provision(t, carts)
	t.Setenv(EnvName("carts"), `{"service":"local-kv","dataDir":"`+carts+`"}`)
	for _, typo := range []string{filepath.Join(root, "kv", "crats"), filepath.Join(root, "kv", "Carts")} {
		t.Setenv(EnvName("sessions"), `{"service":"local-kv","dataDir":"`+typo+`"}`)
		s, err := FromEnv(context.Background(), "sessions")
		if err == nil {
			s.Close()
			t.Fatalf("FromEnv with dataDir %s opened a store", typo)
		}
		for _, want := range []string{"LOCALCLOUD_BINDING_SESSIONS", filepath.Join(typo, sqlitekv.FileName) + " does not exist",
			"KV bindings in this environment: carts, sessions", "created nothing"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
		if !errors.Is(err, bindings.ErrNoStore) || !errors.Is(err, bindings.ErrBindingSetupFailed) {
			t.Errorf("error %v: want ErrNoStore and BINDING_SETUP_FAILED", err)
		}
		if _, err := os.Stat(typo); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("FromEnv created %s (%v)", typo, err)
		}
	}
}
