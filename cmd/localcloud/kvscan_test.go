package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/internal/testutil"
)

// TestKVScanStreamsTheDocumentedJSON: kv scan --json, which writes its
// object page by page, prints byte for byte what the documented schema
// (kvScanJSON through printJSON) gives for the same keys, whatever the
// page size, with --all and without; the text form lists every key once.
func TestKVScanStreamsTheDocumentedJSON(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, goodStack)
	ctx := context.Background()
	s, err := kv.Open(ctx, filepath.Join(filepath.Dir(stack), ".localcloud", "kv", "carts"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	const n = 25
	for i := range n {
		v := []byte(fmt.Sprintf(`<b>"%d"</b> & more`, i))
		if i%4 == 0 {
			v = []byte{0, 0xff, byte(i)} // not UTF-8: base64 only
		}
		var opts []kv.PutOption
		if i%3 == 0 {
			opts = append(opts, kv.WithTTL(time.Hour))
		}
		if _, err := s.Put(ctx, fmt.Sprintf("k:%02d", i), v, opts...); err != nil {
			t.Fatal(err)
		}
	}
	// What printJSON prints for one page of limit keys after cursor.
	want := func(prefix string, limit int, all bool) string {
		out := kvScanJSON{Binding: "carts", Prefix: prefix, Items: []kvItemJSON{}}
		cursor := ""
		for {
			p, err := s.Scan(ctx, prefix, limit, cursor)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range p.Items {
				out.Items = append(out.Items, kvItemJSON{Key: it.Key, valueJSON: encodeValue(it.Value), ExpiresAt: expiresAtJSON(it.ExpiresAt)})
			}
			cursor = p.NextCursor
			if !all || cursor == "" {
				break
			}
		}
		out.NextCursor = cursor
		var buf testutil.SyncBuffer
		a := newApp(nil, &buf, &buf)
		if err := a.printJSON(out); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	for _, c := range []struct {
		prefix string
		limit  int
		all    bool
	}{{"", 1, true}, {"", 7, true}, {"", 1000, true}, {"k:1", 3, true}, {"", 7, false}, {"none:", 5, true}, {"k:", 25, false}} {
		args := []string{"kv", "scan", "-f", stack, "carts", c.prefix, "--limit", fmt.Sprint(c.limit), "--json"}
		if c.all {
			args = append(args, "--all")
		}
		code, out, stderr := runIn(t, nil, args...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, stderr)
		}
		if w := want(c.prefix, c.limit, c.all); string(out) != w {
			t.Errorf("%q printed\n%s\nwant\n%s", args, out, w)
		}
	}
	code, out, _ := runIn(t, nil, "kv", "scan", "-f", stack, "carts", "--limit", "4", "--all")
	if code != 0 || bytes.Count(out, []byte("\n")) != n+1 || strings.Count(string(out), "KEY") != 1 {
		t.Errorf("text scan of %d keys in pages of 4:\n%s", n, out)
	}
	for i := range n {
		if !bytes.Contains(out, []byte(fmt.Sprintf("k:%02d ", i))) {
			t.Errorf("text scan lacks k:%02d", i)
		}
	}
}
