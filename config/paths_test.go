package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/config"
)

// pathCase runs src (with {dir}, {data} and {out} replaced by the stack
// folder, the default dataDir and a folder outside both) after setup has
// shaped the file system. want holds problem prefixes with the same
// placeholders; an empty want means the stack is valid and check runs.
type pathCase struct {
	name  string
	setup func(t *testing.T, dir, data, out string)
	src   string
	want  []string
	check func(t *testing.T, s *config.Stack, dir, data, out string)
}

func mkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	mkdir(t, filepath.Dir(link))
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path string) {
	t.Helper()
	mkdir(t, filepath.Dir(path))
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func orders(path string) string {
	return hdr + "  orders:\n    type: queue\n    path: " + path + "\n" // path at 6:11
}

func wantPath(rel string, abs bool) func(*testing.T, *config.Stack, string, string, string) {
	return func(t *testing.T, s *config.Stack, dir, data, out string) {
		t.Helper()
		want := filepath.Clean(strings.NewReplacer("{dir}", dir, "{data}", data, "{out}", out).Replace(rel))
		b := binding(t, s, "orders")
		if b.Path != want || b.AbsolutePathGiven != abs {
			t.Errorf("Path, AbsolutePathGiven = %q, %v; want %q, %v", b.Path, b.AbsolutePathGiven, want, abs)
		}
	}
}

func TestPaths(t *testing.T) {
	t.Parallel()
	cases := []pathCase{
		{name: "relative inside dataDir", src: orders("queues/orders"), check: wantPath("{data}/queues/orders", false)},
		{name: "dot dot that stays inside", src: orders("a/../b/./c/"), check: wantPath("{data}/b/c", false)},
		{name: "leaves dataDir", src: orders("../orders"), want: []string{`6:11: bindings.orders.path: must stay inside dataDir, got "../orders"; use an absolute path to put a store elsewhere`}},
		{name: "leaves dataDir after cleaning", src: orders("q/../../orders"), want: []string{`6:11: bindings.orders.path: must stay inside dataDir, got "q/../../orders"`}},
		{name: "just dot dot", src: orders(".."), want: []string{`6:11: bindings.orders.path: must stay inside dataDir`}},
		{name: "dataDir itself", src: orders("."), want: []string{"6:11: bindings.orders.path: must not be dataDir itself ({data})"}},
		{name: "dataDir itself after cleaning", src: orders("q/.."), want: []string{"6:11: bindings.orders.path: must not be dataDir itself ({data})"}},
		{name: "empty", src: orders(`""`), want: []string{"6:11: bindings.orders.path: must not be empty; leave it out for <dataDir>/queue/orders"}},
		{name: "tilde", src: orders("~/orders"), want: []string{`6:11: bindings.orders.path: ~ is not expanded, got "~/orders"; write ${HOME}/orders`}},

		{name: "absolute outside is flagged", src: orders("{out}/./stores//orders/"), check: wantPath("{out}/stores/orders", true)},
		{name: "absolute inside dataDir is flagged", src: orders("{data}/q"), check: wantPath("{data}/q", true)},
		{name: "absolute dataDir", src: orders("{data}"), want: []string{"6:11: bindings.orders.path: must not be dataDir itself ({data})"}},
		{name: "absolute folder holding dataDir", src: orders("{dir}"), want: []string{"6:11: bindings.orders.path: {dir} holds dataDir {data}; a binding's folder must not contain dataDir"}},

		{name: "symlink out of dataDir", src: orders("link/orders"),
			setup: func(t *testing.T, dir, data, out string) { symlink(t, out, filepath.Join(data, "link")) },
			want:  []string{"6:11: bindings.orders.path: path resolves through a symlink to {out}/orders, outside dataDir {data}; use an absolute path"}},
		{name: "relative symlink out of dataDir", src: orders("link/orders"),
			setup: func(t *testing.T, dir, data, out string) { symlink(t, "..", filepath.Join(data, "link")) },
			want:  []string{"6:11: bindings.orders.path: path resolves through a symlink to {dir}/orders, outside dataDir {data}"}},
		{name: "default path through a symlink out of dataDir", src: hdr + "  orders:\n    type: queue\n",
			setup: func(t *testing.T, dir, data, out string) { symlink(t, out, filepath.Join(data, "queue")) },
			want:  []string{"4:3: bindings.orders.path: default path queue/orders resolves through a symlink to {out}/orders, outside dataDir {data}"}},
		{name: "symlink to dataDir itself", src: orders("self"),
			setup: func(t *testing.T, dir, data, out string) { symlink(t, ".", filepath.Join(data, "self")) },
			want:  []string{"6:11: bindings.orders.path: path resolves through a symlink to {data}, which is or holds dataDir {data}"}},
		{name: "dangling symlink", src: orders("dead/orders"),
			setup: func(t *testing.T, dir, data, out string) {
				symlink(t, filepath.Join(out, "gone"), filepath.Join(data, "dead"))
			},
			want: []string{"6:11: bindings.orders.path: cannot resolve {data}/dead/orders: {data}/dead is a symlink to a missing target"}},
		{name: "symlink loop", src: orders("loop/orders"),
			setup: func(t *testing.T, dir, data, out string) { symlink(t, "loop", filepath.Join(data, "loop")) },
			want:  []string{"6:11: bindings.orders.path: cannot resolve {data}/loop/orders: "}},
		{name: "symlink that stays inside dataDir", src: orders("link/orders"),
			setup: func(t *testing.T, dir, data, out string) {
				mkdir(t, filepath.Join(data, "real"))
				symlink(t, "real", filepath.Join(data, "link"))
			},
			check: wantPath("{data}/link/orders", false)},
		{name: "absolute path through a symlink anywhere", src: orders("{dir}/link/orders"),
			setup: func(t *testing.T, dir, data, out string) { symlink(t, out, filepath.Join(dir, "link")) },
			check: wantPath("{dir}/link/orders", true)},
		{name: "dataDir a symlink", src: "version: 1\nname: shop\ndataDir: lc\nbindings:\n  orders:\n    type: queue\n",
			setup: func(t *testing.T, dir, data, out string) { symlink(t, out, filepath.Join(dir, "lc")) },
			check: wantPath("{dir}/lc/queue/orders", false)},
		{name: "path is a file", src: orders("q"),
			setup: func(t *testing.T, dir, data, out string) { writeFile(t, filepath.Join(data, "q")) },
			want:  []string{"6:11: bindings.orders.path: {data}/q exists and is not a folder"}},
		{name: "path below a file", src: orders("q/orders"),
			setup: func(t *testing.T, dir, data, out string) { writeFile(t, filepath.Join(data, "q")) },
			want:  []string{"6:11: bindings.orders.path: cannot resolve {data}/q/orders: "}},
		{name: "dataDir is a file", src: "version: 1\nname: shop\ndataDir: lc\n",
			setup: func(t *testing.T, dir, data, out string) { writeFile(t, filepath.Join(dir, "lc")) },
			want:  []string{"3:10: dataDir: {dir}/lc exists and is not a folder"}},
		{name: "dataDir default is a file", src: "version: 1\nname: shop\n",
			setup: func(t *testing.T, dir, data, out string) { writeFile(t, data) },
			want:  []string{"0:0: dataDir: {data} exists and is not a folder"}},
		{name: "dataDir empty", src: "version: 1\nname: shop\ndataDir: \"\"\n", want: []string{"3:10: dataDir: must not be empty; leave it out for .localcloud"}},
		{name: "dataDir tilde", src: "version: 1\nname: shop\ndataDir: ~/lc\n", want: []string{`3:10: dataDir: ~ is not expanded, got "~/lc"; write ${HOME}/lc`}},
		{name: "dataDir outside the stack folder", src: "version: 1\nname: shop\ndataDir: ../shared/lc\nbindings:\n  orders:\n    type: queue\n",
			check: wantPath("{dir}/../shared/lc/queue/orders", false)},
		{name: "dataDir absolute", src: "version: 1\nname: shop\ndataDir: {out}/lc/\nbindings:\n  orders:\n    type: queue\n",
			check: func(t *testing.T, s *config.Stack, dir, data, out string) {
				if want := filepath.Join(out, "lc"); s.DataDir != want {
					t.Errorf("DataDir = %q, want %q", s.DataDir, want)
				}
				wantPath("{out}/lc/queue/orders", false)(t, s, dir, data, out)
			}},
	}
	runPathCases(t, cases)
}

func TestPathsSharedOrNested(t *testing.T) {
	t.Parallel()
	two := func(a, b string) string {
		return hdr +
			"  a:\n    type: queue\n    path: " + a + "\n" + // 6:11
			"  b:\n    type: queue\n    path: " + b + "\n" // 9:11
	}
	cases := []pathCase{
		{name: "siblings with a common prefix", src: two("q/orders", "q/orders-dlq")},
		{name: "same path", src: two("q/orders", "q/./orders/"), want: []string{"9:11: bindings.b.path: shares folder {data}/q/orders with bindings.a; every binding needs its own folder"}},
		{name: "second inside first", src: two("q", "q/inner"), want: []string{"9:11: bindings.b.path: folder {data}/q/inner is inside bindings.a's folder {data}/q; bindings may not nest"}},
		{name: "second holds first", src: two("q/inner", "q"), want: []string{"9:11: bindings.b.path: folder {data}/q holds bindings.a's folder {data}/q/inner; bindings may not nest"}},
		{name: "absolute path shares a relative one", src: two("q", "{data}/q"), want: []string{"9:11: bindings.b.path: shares folder {data}/q with bindings.a"}},
		{name: "explicit path shares a default one", src: hdr + "  carts:\n    type: kv\n  b:\n    type: queue\n    path: kv/carts\n",
			want: []string{"8:11: bindings.b.path: shares folder {data}/kv/carts with bindings.carts"}},
		{name: "default path inside an explicit one", src: hdr + "  a:\n    type: kv\n    path: kv\n  carts:\n    type: kv\n",
			want: []string{"7:3: bindings.carts.path: folder {data}/kv/carts is inside bindings.a's folder {data}/kv"}},
		{name: "same folder through a symlink", src: two("real/q", "alias/q"),
			setup: func(t *testing.T, dir, data, out string) {
				mkdir(t, filepath.Join(data, "real"))
				symlink(t, "real", filepath.Join(data, "alias"))
			},
			want: []string{"9:11: bindings.b.path: folder {data}/alias/q is bindings.a's folder {data}/real/q once symlinks are resolved (both are {data}/real/q)"}},
		{name: "nested through a symlink", src: two("real", "alias/inner"),
			setup: func(t *testing.T, dir, data, out string) {
				mkdir(t, filepath.Join(data, "real"))
				symlink(t, "real", filepath.Join(data, "alias"))
			},
			want: []string{"9:11: bindings.b.path: folder {data}/alias/inner is inside bindings.a's folder {data}/real once symlinks are resolved"}},
		{name: "absolute paths through a symlink", src: two("{out}/a", "{dir}/link/a"),
			setup: func(t *testing.T, dir, data, out string) { symlink(t, out, filepath.Join(dir, "link")) },
			want:  []string{"9:11: bindings.b.path: folder {dir}/link/a is bindings.a's folder {out}/a once symlinks are resolved"}},
		{name: "three bindings in one folder", src: two("q", "q") + "  c:\n    type: kv\n    path: q\n", want: []string{
			"9:11: bindings.b.path: shares folder {data}/q with bindings.a",
			"12:11: bindings.c.path: shares folder {data}/q with bindings.a",
			"12:11: bindings.c.path: shares folder {data}/q with bindings.b",
		}},
	}
	runPathCases(t, cases)
}

func runPathCases(t *testing.T, cases []pathCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Resolve the temp folders themselves, so that expected paths
			// match even where the temp folder sits behind a symlink.
			dir := evalSymlinks(t, t.TempDir())
			out := evalSymlinks(t, t.TempDir())
			data := filepath.Join(dir, config.DefaultDataDir)
			if tc.setup != nil {
				tc.setup(t, dir, data, out)
			}
			r := strings.NewReplacer("{dir}", dir, "{data}", data, "{out}", out)
			s, err := parseIn(t, dir, r.Replace(tc.src))
			if len(tc.want) > 0 {
				want := make([]string, len(tc.want))
				for i, w := range tc.want {
					want[i] = r.Replace(w)
				}
				wantProblems(t, err, want...)
				return
			}
			if err != nil {
				t.Fatalf("Parse:\n%v", err)
			}
			if tc.check != nil {
				tc.check(t, s, dir, data, out)
			}
			for _, b := range s.Bindings {
				if !filepath.IsAbs(b.Path) || filepath.Clean(b.Path) != b.Path {
					t.Errorf("%s: Path %q is not absolute and clean", b.Name, b.Path)
				}
			}
		})
	}
}

func evalSymlinks(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestOverlapsAtScale: the overlap check finds a binding that holds
// thousands of earlier ones and one nested far below, and lists at most
// ten problems per binding however many bindings share its folder.
func TestOverlapsAtScale(t *testing.T) {
	t.Parallel()
	var sb strings.Builder
	sb.WriteString("version: 1\nname: shop\nbindings:\n")
	for i := range 3000 {
		fmt.Fprintf(&sb, "  q%d:\n    type: queue\n    path: same\n", i)
	}
	sb.WriteString("  deep:\n    type: queue\n    path: a/b/c/d/e\n  outer:\n    type: queue\n    path: a\n")
	_, err := parseIn(t, t.TempDir(), sb.String())
	got := problems(t, err)
	per := map[string]int{}
	for _, p := range got {
		_, rest, _ := strings.Cut(p, ": ")
		field, _, _ := strings.Cut(rest, ":")
		per[field]++
	}
	if n := per["bindings.q2999.path"]; n != 11 {
		t.Errorf("bindings.q2999.path has %d problems, want %d and one saying more follow", n, 11)
	}
	if n := per["bindings.q1.path"]; n != 1 {
		t.Errorf("bindings.q1.path has %d problems, want 1 (shares with q0)", n)
	}
	want := "bindings.outer.path: folder "
	found := false
	for _, p := range got {
		if strings.Contains(p, want) && strings.Contains(p, "holds bindings.deep's folder") {
			found = true
		}
		if strings.Contains(p, "bindings.q2999.path: overlaps more bindings above; only the first 10 are listed") {
			per["more"]++
		}
	}
	if !found || per["more"] != 1 {
		t.Errorf("want outer holding deep and one 'more' line; got %d problems, e.g.\n%s", len(got), strings.Join(got[len(got)-3:], "\n"))
	}
}

// TestStackIndex: Binding and DeadLetterOrigins answer from the parsed
// stack as from a hand-made one.
func TestStackIndex(t *testing.T) {
	t.Parallel()
	s, err := parseIn(t, t.TempDir(), "version: 1\nname: shop\nbindings:\n"+
		"  b: {type: queue, maxAttempts: 3, deadLetter: dlq}\n  a: {type: queue, maxAttempts: 2, deadLetter: dlq}\n"+
		"  c: {type: queue}\n  dlq: {type: queue}\n  k: {type: kv}\n")
	if err != nil {
		t.Fatal(err)
	}
	hand := &config.Stack{Bindings: append([]config.Binding(nil), s.Bindings...)}
	for _, st := range []*config.Stack{s, hand} {
		var names []string
		for _, o := range st.DeadLetterOrigins("dlq") {
			names = append(names, o.Name)
		}
		if strings.Join(names, ",") != "a,b" {
			t.Errorf("DeadLetterOrigins(dlq) = %v, want a,b", names)
		}
		if o := st.DeadLetterOrigins("c"); len(o) != 0 {
			t.Errorf("DeadLetterOrigins(c) = %v, want none", o)
		}
		if b, ok := st.Binding("k"); !ok || b.Type != config.TypeKV {
			t.Errorf("Binding(k) = %v, %v", b, ok)
		}
		if _, ok := st.Binding("nope"); ok {
			t.Error("Binding(nope) found")
		}
	}
}
