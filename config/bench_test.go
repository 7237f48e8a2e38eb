package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/config"
)

// bigStack writes a stack file of n KV bindings with default paths (the
// issue's ~200 KB stack at n = 10,000) in a fresh folder and returns it.
func bigStack(b *testing.B, n int) string {
	b.Helper()
	var sb strings.Builder
	sb.WriteString("version: 1\nname: big\nnotify:\n  listen: 127.0.0.1:0\nexplorer: off\nbindings:\n")
	for i := range n {
		fmt.Fprintf(&sb, "  kv-%05d:\n    type: kv\n", i)
	}
	file := filepath.Join(b.TempDir(), "stack.yaml")
	if err := os.WriteFile(file, []byte(sb.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	return file
}

// BenchmarkLoadBindings is what `localcloud validate` and every reload of
// up pay to read and check a stack: config.Load of n KV bindings.
func BenchmarkLoadBindings(b *testing.B) {
	for _, n := range []int{1000, 2000, 4000, 10000} {
		b.Run(fmt.Sprintf("bindings=%d", n), func(b *testing.B) {
			file := bigStack(b, n)
			for b.Loop() {
				st, err := config.Load(file, config.WithLookupEnv(func(string) (string, bool) { return "", false }))
				if err != nil {
					b.Fatal(err)
				}
				if len(st.Bindings) != n {
					b.Fatalf("%d bindings, want %d", len(st.Bindings), n)
				}
			}
		})
	}
}
