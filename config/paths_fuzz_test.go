package config_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/config"
)

// pathStack has a kv binding at its default folder and a queue binding
// whose path comes from ${P}, so the fuzzed path reaches the checks byte for
// byte, whatever YAML would make of it.
const pathStack = hdr + "  carts:\n    type: kv\n  orders:\n    type: queue\n    path: ${P}\n"

// snapshot lists every file, folder and symlink under root with its kind.
func snapshot(t *testing.T, root string) map[string]fs.FileMode {
	t.Helper()
	out := make(map[string]fs.FileMode)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out[p] = d.Type()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzBindingPath checks a binding's path against the README's rule,
// written out here on its own: a relative path is joined to dataDir and must
// stay inside it, neither with .. nor through a symlink, must not be dataDir
// itself and must not share or nest with another binding's folder; an
// absolute path may go anywhere but must not hold dataDir. A refused path is
// a problem at bindings.orders.path, and Parse writes nothing.
//
// The layout: <base>/stack holds the stack file, <base>/out is outside
// dataDir <base>/stack/.localcloud; when dataDir exists it holds link ->
// <base>/out. An absolute input is taken relative to <base>.
func FuzzBindingPath(f *testing.F) {
	for _, seed := range []struct {
		path       string
		dataExists bool
	}{
		{"queues/orders", false}, {"queues/orders", true}, {"a/../b", true}, {"./x/./y/", false},
		{"..", false}, {"../out", true}, {"a/../../b", false}, {"..x", false}, {"x/..", true},
		{".", false}, {"", false}, {"~", false}, {"~/q", true}, {"~q", false},
		{"kv/carts", false}, {"kv", true}, {"kv/carts/q", false}, {"kv/cartsx", true},
		{"link", true}, {"link/q", true}, {"link/../q", true}, {"linkx/q", true},
		{"/out/q", true}, {"/stack/.localcloud", false}, {"/stack", true}, {"/", false}, {"/stack/.localcloud/link/q", true},
		{"/stack/.localcloud/kv/carts", false}, {"a\x00b", false}, {"a\x00b", true}, {"a\nb", true}, {"$x ${y}", false},
		{strings.Repeat("n", 255), true}, {strings.Repeat("a/", 600), false},
	} {
		f.Add(seed.path, seed.dataExists)
	}
	f.Fuzz(func(t *testing.T, p string, dataExists bool) {
		base, err := filepath.EvalSymlinks(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		dir, out := filepath.Join(base, "stack"), filepath.Join(base, "out")
		data := filepath.Join(dir, config.DefaultDataDir)
		for _, d := range []string{dir, out} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if dataExists {
			if err := os.Mkdir(data, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(out, filepath.Join(data, "link")); err != nil {
				t.Fatal(err)
			}
		}
		val := p
		if strings.HasPrefix(p, "/") {
			val = base + p
		}
		before := snapshot(t, base)
		s, err := parseIn(t, dir, pathStack, config.WithLookupEnv(envOf(map[string]string{"P": val})))
		if after := snapshot(t, base); len(after) != len(before) {
			t.Fatalf("Parse changed the file system: %d entries before, %d after", len(before), len(after))
		}

		want, dontCare := pathRule(base, data, val, dataExists)
		if err != nil {
			var errs *config.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Parse: %T %v", err, err)
			}
			for _, pr := range errs.Problems {
				if pr.Field != "bindings.orders.path" || pr.Line != 8 {
					t.Fatalf("path %q: problem %v is not at bindings.orders.path (line 8)", val, pr)
				}
			}
			if want != "" && !dontCare {
				t.Fatalf("path %q refused:\n%v\nbut the rule accepts it as %s", val, err, want)
			}
			return
		}
		b := binding(t, s, "orders")
		if want == "" && !dontCare {
			t.Fatalf("path %q accepted as %s; the rule refuses it", val, b.Path)
		}
		if want != "" && b.Path != want {
			t.Fatalf("path %q gives %s; want %s", val, b.Path, want)
		}
		if b.AbsolutePathGiven != filepath.IsAbs(val) {
			t.Fatalf("path %q: AbsolutePathGiven = %v", val, b.AbsolutePathGiven)
		}
	})
}

// pathRule returns the folder the rule gives for the path value v, or ""
// when the rule refuses it. dontCare marks values whose outcome depends on
// the operating system rather than on the rule: a name over 255 bytes
// (refused by the kernel only when dataDir exists and the name is looked
// up), an absolute path that leaves the temp folder.
func pathRule(base, data, v string, dataExists bool) (want string, dontCare bool) {
	for _, part := range strings.Split(v, "/") {
		if len(part) > 255 {
			dontCare = true
		}
	}
	if len(base)+len(v) >= 4000 {
		dontCare = true
	}
	if v == "" || v == "~" || strings.HasPrefix(v, "~/") || strings.ContainsRune(v, 0) {
		return "", dontCare
	}
	carts := filepath.Join(data, "kv", "carts")
	overlaps := func(p string) bool { return within(p, carts) || within(carts, p) }
	if filepath.IsAbs(v) {
		c := filepath.Clean(v)
		if !within(base, c) {
			dontCare = true
		}
		if within(c, data) || overlaps(c) {
			return "", dontCare
		}
		return c, dontCare
	}
	c := filepath.Clean(v)
	if c == "." || c == ".." || strings.HasPrefix(c, "../") {
		return "", dontCare
	}
	if dataExists && (c == "link" || strings.HasPrefix(c, "link/")) {
		return "", dontCare // through the symlink to <base>/out
	}
	p := filepath.Join(data, c)
	if overlaps(p) {
		return "", dontCare
	}
	return p, dontCare
}

// within reports whether child is parent or below it (both clean, absolute),
// by comparing path elements.
func within(parent, child string) bool {
	return child == parent || strings.HasPrefix(child, parent+"/") || parent == "/"
}
