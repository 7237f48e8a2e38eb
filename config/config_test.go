package config_test

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/config"
)

// hdr starts a stack whose first binding is on line 4.
const hdr = "version: 1\nname: shop\nbindings:\n"

func TestParseAppliesDefaults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := mustParse(t, dir, hdr+
		"  orders:\n"+
		"    type: queue\n"+
		"  carts:\n"+
		"    type: kv\n")

	if s.Version != 1 || s.Name != "shop" {
		t.Errorf("Version, Name = %d, %q; want 1, shop", s.Version, s.Name)
	}
	if s.Dir != dir {
		t.Errorf("Dir = %q, want %q", s.Dir, dir)
	}
	// The file name is a name like any other: relative to the working
	// directory, not to the base folder.
	if want, _ := filepath.Abs("stack.yaml"); s.File != want {
		t.Errorf("File = %q, want %q", s.File, want)
	}
	data := filepath.Join(dir, config.DefaultDataDir)
	if s.DataDir != data {
		t.Errorf("DataDir = %q, want %q", s.DataDir, data)
	}
	if s.Notify != (config.Notify{Listen: config.DefaultListen(data)}) {
		t.Errorf("Notify = %+v, want listen %s and no token", s.Notify, config.DefaultListen(data))
	}
	want := []config.Binding{{
		Name:       "carts",
		Type:       config.TypeKV,
		Engine:     config.EngineSQLite,
		Path:       filepath.Join(data, "kv", "carts"),
		Durability: config.DefaultDurability,
		Line:       6,
	}, {
		Name:              "orders",
		Type:              config.TypeQueue,
		Engine:            config.EngineSQLite,
		Path:              filepath.Join(data, "queue", "orders"),
		VisibilityTimeout: config.DefaultVisibilityTimeout,
		Durability:        config.DefaultDurability,
		RetryDelay:        config.DefaultRetryDelay,
		MaxRetryDelay:     config.DefaultMaxRetryDelay,
		DedupWindow:       config.DefaultDedupWindow,
		Line:              4,
	}}
	if len(s.Bindings) != len(want) {
		t.Fatalf("Bindings = %+v, want %+v", s.Bindings, want)
	}
	for i := range want {
		if s.Bindings[i] != want[i] {
			t.Errorf("Bindings[%d] = %+v\nwant          %+v", i, s.Bindings[i], want[i])
		}
	}
}

func TestDefaultConstants(t *testing.T) {
	t.Parallel()
	if config.DefaultDataDir != ".localcloud" || config.DefaultListenHost != "127.0.0.1" ||
		config.DefaultVisibilityTimeout != 30*time.Second || config.DefaultDurability != "normal" {
		t.Errorf("defaults changed: %q %q %v %q", config.DefaultDataDir, config.DefaultListenHost,
			config.DefaultVisibilityTimeout, config.DefaultDurability)
	}
	if config.VisibilityTimeoutMin != time.Second || config.VisibilityTimeoutMax != 12*time.Hour ||
		config.MaxAttemptsMin != 1 || config.MaxAttemptsMax != 1000 {
		t.Errorf("limits changed")
	}
}

func TestParseEmptyStacks(t *testing.T) {
	t.Parallel()
	for name, src := range map[string]string{
		"no bindings key": "version: 1\nname: shop\n",
		"null bindings":   "version: 1\nname: shop\nbindings:\n",
		"empty mapping":   "version: 1\nname: shop\nbindings: {}\n",
		"null notify":     "version: 1\nname: shop\nnotify:\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := mustParse(t, t.TempDir(), src)
			if len(s.Bindings) != 0 || s.Bindings == nil {
				t.Errorf("Bindings = %#v, want an empty, non-nil slice", s.Bindings)
			}
		})
	}
}

// ruleCase is one stack file with either the problems it must give or, when
// want is empty, a check of what it must parse to.
type ruleCase struct {
	name  string
	src   string
	want  []string
	check func(t *testing.T, s *config.Stack)
}

func runRules(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := parseIn(t, t.TempDir(), tc.src)
			if len(tc.want) > 0 {
				if s != nil {
					t.Errorf("got a stack along with the error")
				}
				wantProblems(t, err, tc.want...)
				return
			}
			if err != nil {
				t.Fatalf("Parse:\n%v", err)
			}
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

func queueWith(field, value string) string {
	return hdr + "  orders:\n    type: queue\n    " + field + ": " + value + "\n"
}

func withAttempts(value string) string {
	return hdr +
		"  orders:\n" +
		"    type: queue\n" +
		"    maxAttempts: " + value + "\n" + // line 6, value at column 18
		"    deadLetter: dlq\n" +
		"  dlq:\n" +
		"    type: queue\n"
}

func listen(value string, token string) string {
	src := "version: 1\nname: shop\nnotify:\n  listen: " + value + "\n" // value at 4:11
	if token != "" {
		src += "  token: " + token + "\n"
	}
	return src
}

func wantVT(d time.Duration) func(*testing.T, *config.Stack) {
	return func(t *testing.T, s *config.Stack) {
		if got := binding(t, s, "orders").VisibilityTimeout; got != d {
			t.Errorf("VisibilityTimeout = %v, want %v", got, d)
		}
	}
}

func wantAttempts(n int) func(*testing.T, *config.Stack) {
	return func(t *testing.T, s *config.Stack) {
		b := binding(t, s, "orders")
		if b.MaxAttempts != n || b.DeadLetter != "dlq" {
			t.Errorf("MaxAttempts, DeadLetter = %d, %q; want %d, dlq", b.MaxAttempts, b.DeadLetter, n)
		}
	}
}

func wantListen(l string) func(*testing.T, *config.Stack) {
	return func(t *testing.T, s *config.Stack) {
		if s.Notify.Listen != l {
			t.Errorf("Listen = %q, want %q", s.Notify.Listen, l)
		}
	}
}

func TestParseVersionAndNames(t *testing.T) {
	t.Parallel()
	name63 := "a" + strings.Repeat("b", 62)
	runRules(t, []ruleCase{
		{name: "version 1", src: "version: 1\nname: shop\n", check: func(t *testing.T, s *config.Stack) {
			if s.Version != 1 {
				t.Errorf("Version = %d", s.Version)
			}
		}},
		{name: "version 2", src: "version: 2\nname: shop\n", want: []string{"1:10: version: must be 1, got 2"}},
		{name: "version 0", src: "version: 0\nname: shop\n", want: []string{"1:10: version: must be 1, got 0"}},
		{name: "version quoted", src: "version: \"1\"\nname: shop\n", want: []string{`1:10: version: must be 1, got "1", a quoted string`}},
		{name: "version text", src: "version: one\nname: shop\n", want: []string{`1:10: version: must be 1, got "one"`}},
		{name: "version missing", src: "name: shop\n", want: []string{"1:1: version: missing; add version: 1"}},
		{name: "version null", src: "version:\nname: shop\n", want: []string{"1:9: version: must be 1, got nothing"}},

		{name: "name 63 characters", src: "version: 1\nname: " + name63 + "\n", check: func(t *testing.T, s *config.Stack) {
			if s.Name != name63 {
				t.Errorf("Name = %q", s.Name)
			}
		}},
		{name: "name 64 characters", src: "version: 1\nname: " + name63 + "c\n", want: []string{`2:7: name: must match [a-z][a-z0-9-]{0,62} (a lowercase letter, then up to 62 lowercase letters, digits or -), got "` + name63 + `c"`}},
		{name: "name one letter with hyphen and digit", src: "version: 1\nname: a-1\n"},
		{name: "name upper case", src: "version: 1\nname: Shop\n", want: []string{`2:7: name: must match [a-z][a-z0-9-]{0,62}`}},
		{name: "name starts with digit", src: "version: 1\nname: 1shop\n", want: []string{`2:7: name: must match`}},
		{name: "name with dot", src: "version: 1\nname: sh.op\n", want: []string{`2:7: name: must match`}},
		{name: "name empty", src: "version: 1\nname: \"\"\n", want: []string{`2:7: name: must match [a-z][a-z0-9-]{0,62} (a lowercase letter, then up to 62 lowercase letters, digits or -), got ""`}},
		{name: "name missing", src: "version: 1\n", want: []string{"1:1: name: missing"}},
		{name: "name a mapping", src: "version: 1\nname: {a: b}\n", want: []string{"2:7: name: must be a stack name, got a mapping"}},

		{name: "binding name 63 characters", src: hdr + "  " + name63 + ":\n    type: kv\n", check: func(t *testing.T, s *config.Stack) {
			binding(t, s, name63)
		}},
		{name: "binding name 64 characters", src: hdr + "  " + name63 + "c:\n    type: kv\n", want: []string{`4:3: bindings.` + name63 + `c: binding name must match [a-z][a-z0-9-]{0,62}`}},
		{name: "binding name upper case", src: hdr + "  Carts:\n    type: kv\n", want: []string{`4:3: bindings.Carts: binding name must match`}},
		{name: "binding name with slash", src: hdr + "  a/b:\n    type: kv\n", want: []string{`4:3: bindings["a/b"]: binding name must match`}},
	})
}

func TestParseBindingTypes(t *testing.T) {
	t.Parallel()
	runRules(t, []ruleCase{
		{name: "kv and queue", src: hdr + "  a:\n    type: kv\n  b:\n    type: queue\n", check: func(t *testing.T, s *config.Stack) {
			if binding(t, s, "a").Type != config.TypeKV || binding(t, s, "b").Type != config.TypeQueue {
				t.Errorf("types = %+v", s.Bindings)
			}
		}},
		{name: "type missing", src: hdr + "  carts:\n    durability: full\n", want: []string{"4:3: bindings.carts.type: missing; must be kv or queue"}},
		{name: "type null", src: hdr + "  carts:\n    type:\n", want: []string{"5:10: bindings.carts.type: missing; must be kv or queue"}},
		{name: "binding null", src: hdr + "  carts:\n", want: []string{"4:3: bindings.carts.type: missing"}},
		{name: "type unknown", src: hdr + "  carts:\n    type: blob\n", want: []string{`5:11: bindings.carts.type: must be kv or queue, got "blob"`}},
		{name: "type upper case", src: hdr + "  carts:\n    type: KV\n", want: []string{`5:11: bindings.carts.type: must be kv or queue, got "KV"`}},
		{name: "binding a scalar", src: hdr + "  carts: kv\n", want: []string{`4:10: bindings.carts: must be a mapping with type and the binding's settings, got "kv"`}},
		{name: "bindings a number", src: "version: 1\nname: shop\nbindings: 3\n", want: []string{`3:11: bindings: must be a mapping from binding names to bindings, got "3"`}},
		{name: "bindings a list", src: "version: 1\nname: shop\nbindings:\n  - carts\n", want: []string{`4:3: bindings: must be a mapping from binding names to bindings, got a list`}},
		{name: "durability full", src: hdr + "  carts:\n    type: kv\n    durability: full\n", check: func(t *testing.T, s *config.Stack) {
			if d := binding(t, s, "carts").Durability; d != config.DurabilityFull {
				t.Errorf("Durability = %q", d)
			}
		}},
		{name: "durability normal on a queue", src: queueWith("durability", "normal")},
		{name: "durability unknown", src: queueWith("durability", "fast"), want: []string{`6:17: bindings.orders.durability: must be normal or full, got "fast"`}},
		{name: "kv with queue settings", src: hdr +
			"  carts:\n" +
			"    type: kv\n" +
			"    visibilityTimeout: 30s\n" +
			"    maxAttempts: 3\n" +
			"    deadLetter: x\n",
			want: []string{
				"6:24: bindings.carts.visibilityTimeout: only queue bindings have visibilityTimeout; carts is a kv binding",
				"7:18: bindings.carts.maxAttempts: only queue bindings have maxAttempts",
				"8:17: bindings.carts.deadLetter: only queue bindings have deadLetter",
			}},
	})
}

func TestParseVisibilityTimeout(t *testing.T) {
	t.Parallel()
	const at = "6:24: bindings.orders.visibilityTimeout: must be a duration between 1s and 12h, got "
	runRules(t, []ruleCase{
		{name: "lowest", src: queueWith("visibilityTimeout", "1s"), check: wantVT(time.Second)},
		{name: "highest", src: queueWith("visibilityTimeout", "12h"), check: wantVT(12 * time.Hour)},
		{name: "minutes", src: queueWith("visibilityTimeout", "1m30s"), check: wantVT(90 * time.Second)},
		{name: "below lowest", src: queueWith("visibilityTimeout", "999ms"), want: []string{at + `"999ms"`}},
		{name: "above highest", src: queueWith("visibilityTimeout", "12h0m1s"), want: []string{at + `"12h0m1s"`}},
		{name: "zero", src: queueWith("visibilityTimeout", "0s"), want: []string{at + `"0s"`}},
		{name: "negative", src: queueWith("visibilityTimeout", "-5s"), want: []string{at + `"-5s"`}},
		{name: "not a duration", src: queueWith("visibilityTimeout", "3 parsecs"), want: []string{at + `"3 parsecs"`}},
		{name: "no unit", src: queueWith("visibilityTimeout", "30"), want: []string{at + "30: add a unit, e.g. 30s"}},
		{name: "a list", src: queueWith("visibilityTimeout", "[30s]"), want: []string{at + "a list"}},
	})
}

func TestParseMaxAttemptsAndDeadLetter(t *testing.T) {
	t.Parallel()
	const at = "6:18: bindings.orders.maxAttempts: must be an integer between 1 and 1000, got "
	runRules(t, []ruleCase{
		{name: "lowest", src: withAttempts("1"), check: wantAttempts(1)},
		{name: "highest", src: withAttempts("1000"), check: wantAttempts(1000)},
		{name: "zero", src: withAttempts("0"), want: []string{at + "0"}},
		{name: "above highest", src: withAttempts("1001"), want: []string{at + "1001"}},
		{name: "negative", src: withAttempts("-1"), want: []string{at + "-1"}},
		{name: "not a number", src: withAttempts("abc"), want: []string{at + `"abc"`}},
		{name: "fraction", src: withAttempts("2.5"), want: []string{at + `"2.5"`}},
		{name: "huge", src: withAttempts("99999999999999999999999"), want: []string{at + `"99999999999999999999999"`}},
		{name: "without deadLetter", src: queueWith("maxAttempts", "5"), want: []string{
			"6:18: bindings.orders.maxAttempts: requires deadLetter: nothing is ever dropped, so set deadLetter to the queue binding that receives a message after 5 failed attempts",
		}},
		{name: "deadLetter without maxAttempts", src: hdr + "  orders:\n    type: queue\n    deadLetter: dlq\n  dlq:\n    type: queue\n", want: []string{
			"6:17: bindings.orders.deadLetter: has no effect without maxAttempts",
		}},
		{name: "deadLetter itself", src: hdr + "  orders:\n    type: queue\n    maxAttempts: 3\n    deadLetter: orders\n", want: []string{
			"7:17: bindings.orders.deadLetter: must name another queue binding, not orders itself",
		}},
		{name: "deadLetter unknown", src: hdr + "  orders:\n    type: queue\n    maxAttempts: 3\n    deadLetter: nope\n  dlq:\n    type: queue\n", want: []string{
			`7:17: bindings.orders.deadLetter: must name a queue binding of this stack, got "nope" (queue bindings: dlq)`,
		}},
		{name: "deadLetter kv", src: hdr + "  orders:\n    type: queue\n    maxAttempts: 3\n    deadLetter: carts\n  carts:\n    type: kv\n", want: []string{
			"7:17: bindings.orders.deadLetter: must name a queue binding, got carts, a kv binding",
		}},
		{name: "chain of dead letters", src: hdr +
			"  orders:\n    type: queue\n    maxAttempts: 3\n    deadLetter: retry\n" +
			"  retry:\n    type: queue\n    maxAttempts: 10\n    deadLetter: parked\n" +
			"  parked:\n    type: queue\n",
			check: func(t *testing.T, s *config.Stack) {
				if r := binding(t, s, "retry"); r.MaxAttempts != 10 || r.DeadLetter != "parked" {
					t.Errorf("retry = %+v", r)
				}
			}},
		{name: "cycle of two", src: hdr +
			"  a:\n    type: queue\n    maxAttempts: 3\n    deadLetter: b\n" + // deadLetter at 7:17
			"  b:\n    type: queue\n    maxAttempts: 3\n    deadLetter: a\n",
			want: []string{"7:17: bindings.a.deadLetter: dead-letter cycle a -> b -> a: messages would move around it forever"}},
		{name: "cycle of three reported at its first member in the file", src: hdr +
			"  z:\n    type: queue\n    maxAttempts: 3\n    deadLetter: x\n" + // 7:17
			"  x:\n    type: queue\n    maxAttempts: 3\n    deadLetter: y\n" +
			"  y:\n    type: queue\n    maxAttempts: 3\n    deadLetter: z\n" +
			"  feeder:\n    type: queue\n    maxAttempts: 3\n    deadLetter: x\n",
			want: []string{"7:17: bindings.z.deadLetter: dead-letter cycle z -> x -> y -> z"}},
	})
}

func TestParseListen(t *testing.T) {
	t.Parallel()
	const at = "4:11: notify.listen: "
	runRules(t, []ruleCase{
		{name: "port 0", src: listen("127.0.0.1:0", ""), check: wantListen("127.0.0.1:0")},
		{name: "port 65535", src: listen("127.0.0.1:65535", ""), check: wantListen("127.0.0.1:65535")},
		{name: "port 65536", src: listen("127.0.0.1:65536", ""), want: []string{at + `port must be between 0 and 65535 (0 picks a free port), got "65536"`}},
		{name: "port negative", src: listen("127.0.0.1:-1", ""), want: []string{at + `port must be between 0 and 65535`}},
		{name: "port name", src: listen("127.0.0.1:nats", ""), want: []string{at + `port must be between 0 and 65535`}},
		{name: "localhost", src: listen("localhost:4222", ""), check: wantListen("localhost:4222")},
		{name: "ipv6 loopback", src: listen("\"[::1]:4222\"", ""), check: wantListen("[::1]:4222")},
		{name: "other 127 address", src: listen("127.8.9.10:4222", ""), check: wantListen("127.8.9.10:4222")},
		{name: "all interfaces without token", src: listen("0.0.0.0:4222", ""), want: []string{at + "host 0.0.0.0 is not a loopback address, so other machines could send wake-up hints to this stack; set notify.token or use 127.0.0.1"}},
		{name: "all interfaces with token", src: listen("0.0.0.0:4222", "s3cret"), check: func(t *testing.T, s *config.Stack) {
			if s.Notify != (config.Notify{Listen: "0.0.0.0:4222", ListenGiven: true, Token: "s3cret"}) {
				t.Errorf("Notify = %+v", s.Notify)
			}
		}},
		{name: "lan address without token", src: listen("192.168.1.5:4222", ""), want: []string{at + "host 192.168.1.5 is not a loopback address"}},
		{name: "lan address with empty token", src: listen("192.168.1.5:4222", `""`), want: []string{at + "host 192.168.1.5 is not a loopback address",
			"5:10: notify.token: must not be empty: an empty secret would turn authentication off; leave notify.token out for none"}},
		{name: "host name", src: listen("example.com:4222", "t"), want: []string{at + `host must be an IP address or localhost, got "example.com"`}},
		{name: "host missing", src: listen("\":4222\"", ""), want: []string{at + `host is missing in ":4222", which would listen on every interface; use 127.0.0.1:4222`}},
		{name: "port missing", src: listen("\"4222\"", ""), want: []string{at + `must be host:port such as 127.0.0.1:4222, got "4222"`}},
		{name: "empty", src: listen(`""`, ""), want: []string{at + `must be host:port such as 127.0.0.1:4222, got ""`}},
		{name: "unknown notify field", src: listen("127.0.0.1:0", "") + "  port: 4222\n", want: []string{"5:3: notify.port: unknown field; expected one of listen, token"}},
		{name: "notify a number", src: "version: 1\nname: shop\nnotify: 3\n", want: []string{`3:9: notify: must be a mapping with listen and token, got "3"`}},
	})
}

func TestParseStructure(t *testing.T) {
	t.Parallel()
	runRules(t, []ruleCase{
		{name: "unknown top field", src: "version: 1\nname: shop\nservices: {}\n", want: []string{"3:1: services: unknown field; expected one of version, name, dataDir, notify, explorer, sqs, jetstream, bindings"}},
		{name: "misspelt top field", src: "version: 1\nname: shop\nbinding: {}\n", want: []string{"3:1: binding: unknown field; did you mean bindings?"}},
		{name: "unknown field close to a known one", src: queueWith("visibility_timeout", "30s"), want: []string{"6:5: bindings.orders.visibility_timeout: unknown field; did you mean visibilityTimeout?"}},
		{name: "wrong case", src: "version: 1\nname: shop\ndatadir: x\n", want: []string{"3:1: datadir: unknown field; did you mean dataDir?"}},
		{name: "duplicate top key", src: "version: 1\nname: shop\nname: cart\n", want: []string{"3:1: name: duplicate key; first set on line 2"}},
		{name: "duplicate binding", src: hdr + "  carts:\n    type: kv\n  carts:\n    type: queue\n", want: []string{"6:3: bindings.carts: duplicate key; first set on line 4"}},
		{name: "duplicate binding field", src: hdr + "  carts:\n    type: kv\n    type: queue\n", want: []string{"6:5: bindings.carts.type: duplicate key; first set on line 5"}},
		{name: "duplicate notify field", src: listen("127.0.0.1:0", "") + "  listen: 127.0.0.1:1\n", want: []string{"5:3: notify.listen: duplicate key; first set on line 4"}},
		{name: "top level list", src: "- version: 1\n", want: []string{"1:1: : a stack file must be a mapping with version, name and bindings; got a list"}},
		{name: "top level scalar", src: "shop\n", want: []string{`1:1: : a stack file must be a mapping with version, name and bindings; got "shop"`}},
		{name: "empty file", src: "# nothing here\n", want: []string{"0:0: : file is empty"}},
		{name: "two documents", src: "version: 1\nname: shop\n---\nversion: 1\n", want: []string{"4:1: : a stack file holds one YAML document"}},
		{name: "syntax error", src: "version: 1\nname: shop\nbindings:\n  carts: [\n", want: []string{"4:10: : invalid YAML: did not find expected node content"}},
		{name: "tab indentation", src: "version: 1\n\tname: shop\n", want: []string{"2:1: : invalid YAML: found a tab character"}},
		// yaml.v3 names the enclosing block's line (3); the token is on 6.
		{name: "syntax error under a parent", src: "version: 1\nname: shop\nbindings:\n  carts:\n    type: kv\n   orders: x\n",
			want: []string{"6:4: : invalid YAML: did not find expected key"}},
		{name: "second colon", src: "version: 1\nname: shop\nbindings:\n  carts:\n    type: kv: x\n",
			want: []string{"5:13: : invalid YAML: mapping values are not allowed in this context"}},
		{name: "non-string key", src: "version: 1\nname: shop\n[a]: 1\n", want: []string{"3:1: : keys must be strings, got a list"}},
		{name: "merge key", src: hdr + "  carts:\n    <<: {type: kv}\n", want: []string{
			"4:3: bindings.carts.type: missing",
			"5:5: bindings.carts: merge keys (<<) are not supported",
		}},
		{name: "anchors and aliases", src: hdr +
			"  orders:\n    type: &q queue\n    visibilityTimeout: &t 2m\n" +
			"  emails:\n    type: *q\n    visibilityTimeout: *t\n",
			check: func(t *testing.T, s *config.Stack) {
				if b := binding(t, s, "emails"); b.Type != config.TypeQueue || b.VisibilityTimeout != 2*time.Minute {
					t.Errorf("emails = %+v", b)
				}
			}},
		{name: "self-referencing alias", src: "version: 1\nname: &n shop\nbindings: &b {x: *b}\n", want: []string{
			"3:15: bindings.x.x: unknown field",
			"3:15: bindings.x.type: missing",
		}},
		{name: "binding key with newline", src: hdr + "  \"a\\nb\":\n    type: kv\n", want: []string{`4:3: bindings["a\nb"]: binding name must match`}},
	})
}

func TestParseReportsEveryProblem(t *testing.T) {
	t.Parallel()
	src := `version: 2
name: Shop
dataDir: .localcloud
notify:
  listen: 0.0.0.0:99999
  tokn: abc
bindings:
  carts:
    type: kv
    visibilityTimeout: 30s
  orders:
    type: queue
    visibilityTimeout: 3 parsecs
    maxAttempts: abc
    deadLetter: orders
  orders:
    type: queue
  emails:
    type: mail
    durability: fast
`
	_, err := parseIn(t, t.TempDir(), src)
	wantProblems(t, err,
		"1:10: version: must be 1, got 2",
		`2:7: name: must match [a-z][a-z0-9-]{0,62}`,
		`5:11: notify.listen: port must be between 0 and 65535 (0 picks a free port), got "99999"`,
		"5:11: notify.listen: host 0.0.0.0 is not a loopback address",
		"6:3: notify.tokn: unknown field; did you mean token?",
		"10:24: bindings.carts.visibilityTimeout: only queue bindings have visibilityTimeout",
		`13:24: bindings.orders.visibilityTimeout: must be a duration between 1s and 12h, got "3 parsecs"`,
		`14:18: bindings.orders.maxAttempts: must be an integer between 1 and 1000, got "abc"`,
		"15:17: bindings.orders.deadLetter: must name another queue binding, not orders itself",
		"16:3: bindings.orders: duplicate key; first set on line 11",
		`19:11: bindings.emails.type: must be kv or queue, got "mail"`,
		`20:17: bindings.emails.durability: must be normal or full, got "fast"`,
	)
	// The formatted error is one "file:line:col: field: msg" line per problem.
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 12 {
		t.Fatalf("Error() has %d lines, want 12:\n%v", len(lines), err)
	}
	if want := `stack.yaml:13:24: bindings.orders.visibilityTimeout: must be a duration between 1s and 12h, got "3 parsecs"`; lines[6] != want {
		t.Errorf("line 7 of Error() = %q\nwant %q", lines[6], want)
	}
}

func TestProblemString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    config.Problem
		want string
	}{
		{config.Problem{File: "s.yaml", Line: 3, Col: 4, Field: "name", Msg: "bad"}, "s.yaml:3:4: name: bad"},
		{config.Problem{File: "s.yaml", Line: 3, Msg: "bad"}, "s.yaml:3: bad"},
		{config.Problem{File: "s.yaml", Field: "dataDir", Msg: "bad"}, "s.yaml: dataDir: bad"},
		{config.Problem{Line: 1, Col: 2, Field: "name", Msg: "bad"}, "1:2: name: bad"},
		{config.Problem{Msg: "bad"}, "bad"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.p, got, tc.want)
		}
	}
}

func TestParseWithoutFileName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := config.Parse(strings.NewReader("version: 1\nname: shop\n"), "", dir, config.WithLookupEnv(noEnv))
	if err != nil {
		t.Fatal(err)
	}
	if s.File != "" || s.Dir != dir || s.DataDir != filepath.Join(dir, ".localcloud") {
		t.Errorf("File, Dir, DataDir = %q, %q, %q", s.File, s.Dir, s.DataDir)
	}
	_, err = config.Parse(strings.NewReader("version: 3\nname: shop\n"), "", dir)
	if err == nil || err.Error() != "1:10: version: must be 1, got 3; this localcloud reads version 1 stack files" {
		t.Errorf("err = %v", err)
	}
}

func TestParseTooLarge(t *testing.T) {
	t.Parallel()
	src := "version: 1\nname: shop\n#" + strings.Repeat("x", config.MaxFileSize) + "\n"
	_, err := parseIn(t, t.TempDir(), src)
	wantProblems(t, err, "0:0: : file is larger than 1048576 bytes")
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "conf", "my-stack.yaml")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	src := "version: 1\nname: shop\ndataDir: data\nbindings:\n  carts:\n    type: kv\n"
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := config.Load(file, config.WithLookupEnv(noEnv))
	if err != nil {
		t.Fatal(err)
	}
	if s.File != file || s.Dir != filepath.Dir(file) {
		t.Errorf("File, Dir = %q, %q", s.File, s.Dir)
	}
	if want := filepath.Join(dir, "conf", "data", "kv", "carts"); binding(t, s, "carts").Path != want {
		t.Errorf("carts.Path = %q, want %q", binding(t, s, "carts").Path, want)
	}

	if err := os.WriteFile(file, []byte("version: 1\nname: Shop\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = config.Load(file)
	if !errors.Is(err, config.ErrInvalid) || !strings.HasPrefix(err.Error(), file+":2:7: name: ") {
		t.Errorf("Load of an invalid file = %v; want ErrInvalid naming %s:2:7", err, file)
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "nope.yaml")
	s, err := config.Load(file)
	if s != nil || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load = %v, %v; want fs.ErrNotExist", s, err)
	}
	if errors.Is(err, config.ErrInvalid) {
		t.Errorf("a missing file matches ErrInvalid")
	}
	if !strings.Contains(err.Error(), file) {
		t.Errorf("error %q does not name %s", err, file)
	}
}

func TestLoadExample(t *testing.T) {
	t.Parallel()
	s, err := config.Load("../examples/stack.yaml", config.WithLookupEnv(noEnv))
	if err != nil {
		t.Fatalf("examples/stack.yaml:\n%v", err)
	}
	// The example keeps the stack's default port, stable across restarts.
	if s.Name != "shop" || s.Notify.ListenGiven || s.Notify.Listen != config.DefaultListen(s.DataDir) {
		t.Errorf("Name, Listen = %q, %q (given %v)", s.Name, s.Notify.Listen, s.Notify.ListenGiven)
	}
	var kv, queue []string
	for _, b := range s.Bindings {
		if b.Type == config.TypeKV {
			kv = append(kv, b.Name)
		} else {
			queue = append(queue, b.Name)
		}
	}
	if len(kv) < 2 || len(queue) < 3 {
		t.Errorf("kv %v, queue %v; want at least 2 kv and 3 queue bindings", kv, queue)
	}
	orders := binding(t, s, "orders")
	if orders.MaxAttempts != 5 || orders.DeadLetter != "orders-dlq" {
		t.Errorf("orders = %+v", orders)
	}
	if _, ok := s.Binding("orders-dlq"); !ok {
		t.Errorf("no orders-dlq binding")
	}
}

func TestHelpers(t *testing.T) {
	t.Parallel()
	if got := config.Subject("shop", "orders-dlq"); got != "localcloud.shop.orders-dlq.available" {
		t.Errorf("Subject = %q", got)
	}
	if got := config.EnvName("orders-dlq"); got != "LOCALCLOUD_BINDING_ORDERS_DLQ" {
		t.Errorf("EnvName = %q", got)
	}
	if got := config.EnvName("carts"); got != "LOCALCLOUD_BINDING_CARTS" {
		t.Errorf("EnvName = %q", got)
	}
	env := func(m map[string]string) func(string) string {
		return func(k string) string { return m[k] }
	}
	if got := config.DefaultFile(env(nil)); got != "stack.yaml" {
		t.Errorf("DefaultFile without LOCALCLOUD_STACK = %q", got)
	}
	if got := config.DefaultFile(env(map[string]string{"LOCALCLOUD_STACK": "dev.yaml"})); got != "dev.yaml" {
		t.Errorf("DefaultFile with LOCALCLOUD_STACK = %q", got)
	}

	s := &config.Stack{Bindings: []config.Binding{{Name: "a"}, {Name: "b"}}}
	b, ok := s.Binding("b")
	if !ok || b != &s.Bindings[1] {
		t.Errorf("Binding(b) = %v, %v; want a pointer to Bindings[1]", b, ok)
	}
	if _, ok := s.Binding("c"); ok {
		t.Errorf("Binding(c) found")
	}
	if _, ok := (*config.Stack)(nil).Binding("a"); ok {
		t.Errorf("nil Stack has a binding")
	}
}

func ExampleParse() {
	src := `version: 1
name: shop
bindings:
  orders:
    type: queue
    visibilityTimeout: 3 parsecs
    maxAttempts: 5
`
	_, err := config.Parse(strings.NewReader(src), "stack.yaml", os.TempDir())
	fmt.Println(err)
	// Output:
	// stack.yaml:6:24: bindings.orders.visibilityTimeout: must be a duration between 1s and 12h, got "3 parsecs"
	// stack.yaml:7:18: bindings.orders.maxAttempts: requires deadLetter: nothing is ever dropped, so set deadLetter to the queue binding that receives a message after 5 failed attempts
}

func TestLoadWithDataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "stack.yaml")
	src := "version: 1\nname: shop\ndataDir: data\nbindings:\n  carts:\n    type: kv\n  orders:\n    type: queue\n    path: q/orders\n"
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "elsewhere")
	s, err := config.Load(file, config.WithLookupEnv(noEnv), config.WithDataDir(other))
	if err != nil {
		t.Fatal(err)
	}
	if s.DataDir != other {
		t.Errorf("DataDir = %q, want %q", s.DataDir, other)
	}
	if want := filepath.Join(other, "kv", "carts"); binding(t, s, "carts").Path != want {
		t.Errorf("carts.Path = %q, want %q", binding(t, s, "carts").Path, want)
	}
	if want := filepath.Join(other, "q", "orders"); binding(t, s, "orders").Path != want {
		t.Errorf("orders.Path = %q, want %q", binding(t, s, "orders").Path, want)
	}
}

// TestDefaultFileFindsStackYml: stack.yml is read when stack.yaml is absent;
// with both, stack.yaml wins. (Not parallel: it changes the working dir.)
func TestDefaultFileFindsStackYml(t *testing.T) {
	t.Chdir(t.TempDir())
	noVar := func(string) string { return "" }
	if got := config.DefaultFile(noVar); got != "stack.yaml" {
		t.Errorf("DefaultFile in an empty folder = %q, want stack.yaml", got)
	}
	if err := os.WriteFile("stack.yml", []byte("version: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := config.DefaultFile(noVar); got != "stack.yml" {
		t.Errorf("DefaultFile with only stack.yml = %q, want stack.yml", got)
	}
	if err := os.WriteFile("stack.yaml", []byte("version: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := config.DefaultFile(noVar); got != "stack.yaml" {
		t.Errorf("DefaultFile with both = %q, want stack.yaml", got)
	}
}

// TestDefaulted lists exactly the defaults the file did not override.
func TestDefaulted(t *testing.T) {
	t.Parallel()
	src := "version: 1\nname: shop\nnotify:\n  listen: 127.0.0.1:0\nbindings:\n" +
		"  carts:\n    type: kv\n    durability: full\n" +
		"  orders:\n    type: queue\n    path: q/orders\n" +
		"  emails:\n    type: queue\n    visibilityTimeout: 1m\n    durability: normal\n"
	s, err := config.Parse(strings.NewReader(src), "", t.TempDir(), config.WithLookupEnv(noEnv))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"dataDir", "explorer.listen", "sqs.listen", "bindings.carts.path", "bindings.emails.path",
		"bindings.orders.durability", "bindings.orders.visibilityTimeout"}
	got := append([]string(nil), s.Defaulted...)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Defaulted = %q, want %q", got, want)
	}
}

// TestDefaultListenIsStablePerDataDir: a stack that sets no notify.listen
// gets 127.0.0.1 and a port of the default range that depends only on its
// data dir: the same at every load (every restart of up), another for
// another data dir (almost always), and ListenGiven false so up may move
// off a taken one; a listen the file sets is kept and marked given.
func TestDefaultListenIsStablePerDataDir(t *testing.T) {
	t.Parallel()
	ports := map[string]bool{}
	for i := range 20 {
		dir := filepath.Join(t.TempDir(), fmt.Sprint(i))
		var first string
		for range 2 {
			s, err := parseIn(t, dir, "version: 1\nname: shop\nbindings: {}\n")
			if err != nil {
				t.Fatal(err)
			}
			if s.Notify.ListenGiven || (first != "" && s.Notify.Listen != first) {
				t.Fatalf("listen %q given=%v, first load %q", s.Notify.Listen, s.Notify.ListenGiven, first)
			}
			first = s.Notify.Listen
		}
		host, port, err := net.SplitHostPort(first)
		p, _ := strconv.Atoi(port)
		if err != nil || host != "127.0.0.1" || p < config.DefaultPortBase || p >= config.DefaultPortBase+config.DefaultPortCount {
			t.Fatalf("default listen %q, want 127.0.0.1:%d..%d", first, config.DefaultPortBase, config.DefaultPortBase+config.DefaultPortCount-1)
		}
		ports[port] = true
	}
	if len(ports) < 15 {
		t.Errorf("20 data dirs share %d default ports", len(ports))
	}
	s, err := parseIn(t, t.TempDir(), "version: 1\nname: shop\nnotify:\n  listen: 127.0.0.1:0\nbindings: {}\n")
	if err != nil || s.Notify.Listen != "127.0.0.1:0" || !s.Notify.ListenGiven {
		t.Fatalf("listen given: %+v, %v", s.Notify, err)
	}
}

// TestFindStackFileStopsAtRepoRoot: the nearest stack file up from a
// folder is found; the search ends at the folder holding .git.
func TestFindStackFileStopsAtRepoRoot(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	deep := filepath.Join(repo, "a", "b")
	for _, d := range []string{filepath.Join(repo, ".git"), deep} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "stack.yaml"), []byte("version: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, top, ok := config.FindStackFile(deep); ok || top != repo {
		t.Errorf("FindStackFile above the repository root = %q %q %v, want not found, top %s", p, top, ok, repo)
	}
	want := filepath.Join(repo, "a", "stack.yml")
	if err := os.WriteFile(want, []byte("version: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, _, ok := config.FindStackFile(deep); !ok || p != want {
		t.Errorf("FindStackFile = %q %v, want %s", p, ok, want)
	}
}
