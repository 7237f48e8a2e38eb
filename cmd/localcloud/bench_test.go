package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchQueueModes: --ack, --senders and --receivers parse, run their
// load, and the result JSON says which mode ran.
func TestBenchQueueModes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args      []string
		ack       string
		senders   int
		receivers string
		zero      []string // ops that must not run in this mode
	}{
		{[]string{"--ack", "batch", "--batch", "5"}, "batch", 0, "loop", nil},
		{[]string{"--senders", "1", "--workers", "2"}, "each", 1, "loop", nil},
		{[]string{"--senders", "1", "--receivers", "consume", "--workers", "4"}, "each", 1, "consume", []string{"receive", "ack"}},
	} {
		args := append([]string{"bench", "queue", "--duration", "300ms", "--json"}, c.args...)
		code, stdout, stderr := runApp(t, nil, args...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, stderr)
		}
		var out benchJSON
		if err := json.Unmarshal([]byte(stdout), &out); err != nil {
			t.Fatalf("%q: %v: %s", args, err, stdout)
		}
		if len(out.Benches) != 1 {
			t.Fatalf("%q: %+v", args, out)
		}
		r := out.Benches[0]
		if r.Ack != c.ack || r.Senders != c.senders || r.Receivers != c.receivers {
			t.Errorf("%q: ack %q senders %d receivers %q, want %q %d %q", args, r.Ack, r.Senders, r.Receivers, c.ack, c.senders, c.receivers)
		}
		if r.MessagesPerSec <= 0 || r.FirstError != "" {
			t.Errorf("%q: messagesPerSec %v, firstError %q", args, r.MessagesPerSec, r.FirstError)
		}
		for _, o := range r.Ops {
			idle := false
			for _, z := range c.zero {
				idle = idle || o.Op == z
			}
			if idle != (o.Count == 0) || o.Errors != 0 {
				t.Errorf("%q: op %+v (want it idle: %v)", args, o, idle)
			}
		}
	}
	// kv results carry none of the queue modes.
	code, stdout, stderr := runApp(t, nil, "bench", "kv", "--duration", "100ms", "--workers", "1", "--json")
	if code != 0 || strings.Contains(stdout, `"ack"`) || strings.Contains(stdout, `"receivers"`) {
		t.Errorf("bench kv: exit %d, %s %s", code, stdout, stderr)
	}
}

// TestBenchQueueModeErrors: bad values of the new flags are usage errors
// that name the flag and the value.
func TestBenchQueueModeErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "queue", "--ack", "some"}, `--ack must be each or batch, got "some"`},
		{[]string{"bench", "queue", "--senders", "-1"}, "--senders must be 0-1024, got -1"},
		{[]string{"bench", "queue", "--receivers", "pool"}, `--receivers must be loop or consume, got "pool"`},
		{[]string{"bench", "queue", "--receivers", "consume"}, "--receivers consume needs --senders 1 or more"},
		{[]string{"bench", "queue", "--receivers", "consume", "--senders", "1", "--workers", "300"}, "--workers must be 1-256 with --receivers consume, got 300"},
		{[]string{"bench", "kv", "--senders", "2"}, "--senders applies to the queue bench only"},
		{[]string{"bench", "kv", "--ack", "batch"}, "--ack applies to the queue bench only"},
	} {
		code, _, stderr := runApp(t, nil, c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, "Try: ") {
			t.Errorf("%q: exit %d, stderr %q, want exit 2 with %q", c.args, code, stderr, c.want)
		}
	}
}
