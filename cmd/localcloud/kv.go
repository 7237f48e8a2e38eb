package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/config"
)

// kvCommand reads and writes a KV binding's store.
type kvCommand struct {
	app *app
}

func (c *kvCommand) Run(ctx context.Context, args []string) error {
	return subcommands(ctx, "kv", map[string]func(context.Context, []string) error{
		"get":    c.get,
		"put":    c.put,
		"delete": c.delete,
		"exists": c.exists,
		"scan":   c.scan,
	}, args)
}

// The --json outputs of kv (docs/CLI.md).
type (
	kvGetJSON struct {
		Binding string `json:"binding"`
		Key     string `json:"key"`
		Found   bool   `json:"found"`
		*valueJSON
		// ExpiresAt is the key's expiry in unix milliseconds, null when it
		// never expires; absent when the key was not found.
		ExpiresAt json.RawMessage `json:"expiresAt,omitempty"`
	}
	kvPutJSON struct {
		Binding string `json:"binding"`
		Key     string `json:"key"`
		Written bool   `json:"written"`
		Bytes   int    `json:"bytes"`
		// TTLMillis is the TTL given with --ttl; absent without one.
		TTLMillis *int64 `json:"ttlMillis,omitempty"`
	}
	kvDeleteJSON struct {
		Binding string `json:"binding"`
		Key     string `json:"key"`
		Deleted bool   `json:"deleted"`
	}
	kvExistsJSON struct {
		Binding string `json:"binding"`
		Key     string `json:"key"`
		Exists  bool   `json:"exists"`
	}
	kvScanJSON struct {
		Binding    string       `json:"binding"`
		Prefix     string       `json:"prefix"`
		Items      []kvItemJSON `json:"items"`
		NextCursor string       `json:"nextCursor"`
	}
	kvItemJSON struct {
		Key string `json:"key"`
		valueJSON
		// ExpiresAt is the key's expiry in unix milliseconds, null when it
		// never expires.
		ExpiresAt json.RawMessage `json:"expiresAt"`
	}
)

// kvFlags are the flags of every kv subcommand.
func kvFlags(sub string) (fs *flag.FlagSet, file *string, asJSON *bool) {
	fs = newFlagSet("kv " + sub)
	return fs, stackFlag(fs), jsonFlag(fs)
}

// openBinding resolves and opens the KV binding called name; create makes
// the store when it does not exist yet.
// close closes the store (and a jetstream binding's connection).
func (c *kvCommand) openBinding(ctx context.Context, file, name string, create bool) (s *kv.Store, close func(), b config.Binding, err error) {
	st, b, err := c.app.findBinding(file, name, config.TypeKV)
	if err != nil {
		return nil, nil, b, err
	}
	s, close, err = openKV(ctx, st, b, create)
	return s, close, b, err
}

// withKey runs a subcommand that takes BINDING KEY and reads an existing
// store: it parses the flags and arguments, opens the store and calls do
// with it, the binding, the key and whether --json was given.
func (c *kvCommand) withKey(ctx context.Context, sub string, args []string, do func(s *kv.Store, b config.Binding, key string, asJSON bool) error) error {
	fs, file, asJSON := kvFlags(sub)
	pos, err := parseWantArgs(fs, args, 2, 2, "BINDING KEY")
	if err != nil {
		return err
	}
	s, closeStore, b, err := c.openBinding(ctx, *file, pos[0], false)
	if err != nil {
		return err
	}
	defer closeStore()
	return do(s, b, pos[1], *asJSON)
}

func (c *kvCommand) get(ctx context.Context, args []string) error {
	return c.withKey(ctx, "get", args, func(s *kv.Store, b config.Binding, key string, asJSON bool) error {
		v, ok, err := s.Get(ctx, key)
		if err != nil {
			return storeErr("kv get", err)
		}
		if asJSON {
			out := kvGetJSON{Binding: b.Name, Key: key, Found: ok}
			if ok {
				val := encodeValue(v)
				out.valueJSON = &val
				// The expiry from Lookup; a row another program wrote
				// that Lookup cannot read (Get coerces it) shows none.
				if e, live, lerr := s.Lookup(ctx, key); lerr == nil && live {
					out.ExpiresAt = expiresAtJSON(e.ExpiresAt)
				}
			}
			if err := c.app.printJSON(out); err != nil {
				return err
			}
		}
		if !ok {
			return &hintError{
				err: fmt.Errorf("key %q not found in kv binding %s (or it expired)", key, b.Name),
				try: fmt.Sprintf("localcloud kv scan %s PREFIX lists the keys that start with PREFIX", b.Name),
			}
		}
		if !asJSON {
			_, err = c.app.stdout.Write(v)
			// On a terminal the prompt should not follow the value on its
			// line; piped or redirected, the bytes stay exact.
			if err == nil && isTTY(c.app.stdout) && !bytes.HasSuffix(v, []byte("\n")) {
				_, err = io.WriteString(c.app.stdout, "\n")
			}
		}
		return err
	})
}

func (c *kvCommand) put(ctx context.Context, args []string) error {
	fs, file, asJSON := kvFlags("put")
	ttl := fs.Duration("ttl", 0, "expire the key after `D` (e.g. 30s, 1h; millisecond precision)")
	ifNotExists := fs.Bool("if-not-exists", false, "write only if the key is absent or expired; exit 1 if it exists")
	pos, err := parseWantArgs(fs, args, 3, 3, "BINDING KEY VALUE (or - to read the value from stdin)")
	if err != nil {
		return err
	}
	ttlSet := false
	fs.Visit(func(f *flag.Flag) { ttlSet = ttlSet || f.Name == "ttl" })
	if ttlSet && *ttl <= 0 {
		return &usageError{msg: fmt.Sprintf("--ttl must be positive, got %s", *ttl), try: "localcloud kv put BINDING KEY VALUE --ttl 30s"}
	}
	value, err := c.app.readInput(pos[2], "value", kv.MaxValueBytes)
	if err != nil {
		return err
	}
	s, closeStore, b, err := c.openBinding(ctx, *file, pos[0], true)
	if err != nil {
		return err
	}
	defer closeStore()
	var opts []kv.PutOption
	if ttlSet {
		opts = append(opts, kv.WithTTL(*ttl))
	}
	if *ifNotExists {
		opts = append(opts, kv.IfNotExists())
	}
	key := pos[1]
	written, err := s.Put(ctx, key, value, opts...)
	if err != nil {
		return storeErr("kv put", err)
	}
	if *asJSON {
		out := kvPutJSON{Binding: b.Name, Key: key, Written: written, Bytes: len(value)}
		if ttlSet {
			ms := ttl.Milliseconds()
			out.TTLMillis = &ms
		}
		if err := c.app.printJSON(out); err != nil {
			return err
		}
	}
	if !written {
		return &hintError{
			err: fmt.Errorf("key %q already exists in kv binding %s; nothing was written (--if-not-exists)", key, b.Name),
			try: "leave out --if-not-exists to overwrite it",
		}
	}
	if !*asJSON {
		expiry := ""
		if ttlSet {
			expiry = fmt.Sprintf(", expires in %s", *ttl)
		}
		fmt.Fprintf(c.app.stderr, "stored %s in %s (%s%s)\n", key, b.Name, quantity(len(value), "byte"), expiry)
	}
	return nil
}

func (c *kvCommand) delete(ctx context.Context, args []string) error {
	return c.withKey(ctx, "delete", args, func(s *kv.Store, b config.Binding, key string, asJSON bool) error {
		if err := s.Delete(ctx, key); err != nil {
			return storeErr("kv delete", err)
		}
		if asJSON {
			return c.app.printJSON(kvDeleteJSON{Binding: b.Name, Key: key, Deleted: true})
		}
		fmt.Fprintf(c.app.stderr, "deleted %s from %s (if it was there)\n", key, b.Name)
		return nil
	})
}

func (c *kvCommand) exists(ctx context.Context, args []string) error {
	return c.withKey(ctx, "exists", args, func(s *kv.Store, b config.Binding, key string, asJSON bool) error {
		ok, err := s.Exists(ctx, key)
		if err != nil {
			return storeErr("kv exists", err)
		}
		if asJSON {
			err = c.app.printJSON(kvExistsJSON{Binding: b.Name, Key: key, Exists: ok})
		} else {
			_, err = fmt.Fprintln(c.app.stdout, ok)
		}
		if err != nil {
			return err
		}
		if !ok {
			return &exitCodeError{code: exitFailure} // like test(1): the answer is the exit code
		}
		return nil
	})
}

func (c *kvCommand) scan(ctx context.Context, args []string) error {
	fs, file, asJSON := kvFlags("scan")
	limit := fs.Int("limit", kv.DefaultScanLimit, fmt.Sprintf("at most `N` keys per page (1-%d)", kv.MaxScanLimit))
	cursor := fs.String("cursor", "", "continue after the page that printed cursor `C`")
	all := fs.Bool("all", false, "follow the cursor and print every page")
	pos, err := parseWantArgs(fs, args, 1, 2, "BINDING [PREFIX]")
	if err != nil {
		return err
	}
	if len(pos) == 1 {
		pos = append(pos, "") // every key
	}
	if *limit < 1 || *limit > kv.MaxScanLimit {
		return &usageError{msg: fmt.Sprintf("--limit must be between 1 and %d, got %d", kv.MaxScanLimit, *limit), try: "localcloud kv scan -h"}
	}
	s, closeStore, b, err := c.openBinding(ctx, *file, pos[0], false)
	if err != nil {
		return err
	}
	defer closeStore()
	prefix := pos[1]
	// Page by page: each page is printed (and flushed) before the next is
	// read, so --all over a million keys holds one page, and its first key
	// shows at once.
	w := bufio.NewWriter(c.app.stdout)
	var out scanPrinter = &scanText{w: w}
	if *asJSON {
		out = &scanJSON{w: w}
	}
	if err := out.start(b.Name, prefix); err != nil {
		return err
	}
	next := *cursor
	for {
		page, err := s.Scan(ctx, prefix, *limit, next)
		if err != nil {
			_ = w.Flush() // what was listed stays listed
			return storeErr("kv scan", err)
		}
		if err := out.page(page.Items); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
		next = page.NextCursor
		if !*all || next == "" {
			break
		}
	}
	if err := out.end(next); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if next != "" && !*asJSON {
		args := b.Name
		if prefix != "" {
			args += " " + prefix
		}
		fmt.Fprintf(c.app.stderr, "more keys follow: localcloud kv scan %s --cursor %s (or --all)\n", args, next)
	}
	return nil
}

// scanPrinter prints a scan as it goes: start, then each page, then end
// with the cursor that follows ("" for none).
type scanPrinter interface {
	start(binding, prefix string) error
	page(items []kv.Item) error
	end(next string) error
}

// scanText is the table: the header once, each page aligned on its own.
type scanText struct{ w io.Writer }

func (t *scanText) start(string, string) error {
	_, err := fmt.Fprintln(t.w, "KEY\tBYTES\tVALUE\tEXPIRES")
	return err
}

func (t *scanText) page(items []kv.Item) error {
	tw := tabwriter.NewWriter(t.w, 0, 0, 2, ' ', 0)
	for _, it := range items {
		exp := "-"
		if !it.ExpiresAt.IsZero() {
			exp = fmtTime(it.ExpiresAt)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", it.Key, len(it.Value), preview(it.Value), exp)
	}
	return tw.Flush()
}

func (t *scanText) end(string) error { return nil }

// scanJSON is the kvScanJSON object written as it goes, byte for byte
// what printJSON prints for it: the items array is streamed, and
// nextCursor, known only at the end, comes last.
type scanJSON struct {
	w     io.Writer
	items int
}

func (j *scanJSON) start(binding, prefix string) error {
	_, err := fmt.Fprintf(j.w, "{\n  \"binding\": %s,\n  \"prefix\": %s,\n  \"items\": [", jsonString(binding), jsonString(prefix))
	return err
}

func (j *scanJSON) page(items []kv.Item) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("    ", "  ")
	for _, it := range items {
		buf.Reset()
		if err := enc.Encode(kvItemJSON{Key: it.Key, valueJSON: encodeValue(it.Value), ExpiresAt: expiresAtJSON(it.ExpiresAt)}); err != nil {
			return err
		}
		sep := ",\n    "
		if j.items == 0 {
			sep = "\n    "
		}
		j.items++
		if _, err := io.WriteString(j.w, sep); err != nil {
			return err
		}
		if _, err := j.w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))); err != nil {
			return err
		}
	}
	return nil
}

func (j *scanJSON) end(next string) error {
	close := "]"
	if j.items > 0 {
		close = "\n  ]"
	}
	_, err := fmt.Fprintf(j.w, "%s,\n  \"nextCursor\": %s\n}\n", close, jsonString(next))
	return err
}

// jsonString is s as a JSON string, HTML characters as they are.
func jsonString(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(buf.String(), "\n")
}

func (c *kvCommand) Usage() {
	fmt.Fprint(c.app.stdout, kvUsage)
}

func (c *kvCommand) subUsage(fs *flag.FlagSet) bool {
	return printSubUsage(c.app.stdout, kvUsage, kvSubcommands, fs)
}

// kvUsage is the help of kv and all its subcommands; "kv SUB -h" prints
// SUB's part of it (printSubUsage).
const kvUsage = `Read and write a KV binding's store.

Usage:
  localcloud kv get    BINDING KEY                 [--json]
  localcloud kv put    BINDING KEY VALUE|-         [--ttl D] [--if-not-exists] [--json]
  localcloud kv delete BINDING KEY                 [--json]
  localcloud kv exists BINDING KEY                 [--json]
  localcloud kv scan   BINDING PREFIX              [--limit N] [--cursor C] [--all] [--json]

Every subcommand also takes -f FILE (default $LOCALCLOUD_STACK, else
./stack.yaml); flags may come before or after the arguments, and "--" ends
the flags (for a VALUE starting with "-").

  get     writes the value's raw bytes to stdout, nothing added when
          piped or redirected (binary safe); on a terminal a newline ends
          it. Exits 1 with an error when the key is absent or expired.
  put     stores VALUE, or stdin when VALUE is "-" (binary safe, at most
          24576 bytes). --ttl makes the key expire; with --if-not-exists
          it writes only if the key is absent or expired, else exits 1.
  delete  removes the key; a missing key is not an error.
  exists  prints true or false and exits 0 or 1 accordingly.
  scan    lists live keys starting with PREFIX in key order: key, size and
          a quoted preview of the value. With more keys than --limit it
          prints the next --cursor on stderr; --all prints every page.

Keys are 1-512 bytes of A-Z a-z 0-9 - _ : . Reads need the store to exist;
put creates it (as an app's first write would). Works with or without
localcloud up running.

On a jetstream binding (engine: jetstream) the same commands work on its
stream LCKV_<binding>, reached like an app's FromEnv: the stack's
jetstream.servers, or the embedded server of the running localcloud up
(which must then run). See docs/CLI.md, "Jetstream bindings".

Examples:
  localcloud kv put carts cart:42 '{"items":3}' --ttl 1h
  localcloud kv get carts cart:42
  cat photo.jpg | localcloud kv put carts photo:1 -
  localcloud kv get carts photo:1 > copy.jpg
  localcloud kv scan carts cart: --all --json

Flags:
  -f FILE           stack file
  --json            print one JSON object instead of text (docs/CLI.md)
  --ttl D           put: expire after D (30s, 5m, 1h)
  --if-not-exists   put: only if absent or expired
  --limit N         scan: keys per page, 1-1000 (default 1000)
  --cursor C        scan: continue after a page
  --all             scan: every page
`

// expiresAtJSON is an expiry in unix milliseconds, or null for none.
func expiresAtJSON(t time.Time) json.RawMessage {
	if t.IsZero() {
		return json.RawMessage("null")
	}
	return json.RawMessage(strconv.FormatInt(t.UnixMilli(), 10))
}
