package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
)

// TestKVScanEveryKeyAndExpiresAt: kv scan without a prefix lists every
// key; kv get --json and kv scan --json show expiresAt (unix ms or null).
func TestKVScanEveryKeyAndExpiresAt(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, goodStack)
	for _, args := range [][]string{{"a:1", "x"}, {"b", "y", "--ttl", "1h"}, {"z.z", "w"}} {
		if code, _, stderr := runIn(t, nil, append([]string{"kv", "put", "-f", stack, "carts"}, args...)...); code != 0 {
			t.Fatal(stderr)
		}
	}
	code, out, stderr := runIn(t, nil, "kv", "scan", "-f", stack, "carts", "--json")
	var sc struct {
		Items []struct {
			Key       string `json:"key"`
			ExpiresAt *int64 `json:"expiresAt"`
		} `json:"items"`
	}
	if code != 0 || json.Unmarshal(out, &sc) != nil || len(sc.Items) != 3 {
		t.Fatalf("kv scan without prefix: %d %s %s", code, out, stderr)
	}
	if !strings.Contains(compactJSON(out), `"expiresAt":null`) {
		t.Errorf("scan --json lacks expiresAt null for keys without TTL: %s", out)
	}
	inHour := time.Now().Add(time.Hour).UnixMilli()
	if sc.Items[0].Key != "a:1" || sc.Items[0].ExpiresAt != nil || sc.Items[1].ExpiresAt == nil ||
		*sc.Items[1].ExpiresAt < inHour-60_000 || *sc.Items[1].ExpiresAt > inHour+1000 || sc.Items[2].Key != "z.z" {
		t.Errorf("scan items %+v", sc.Items)
	}
	code, out, _ = runIn(t, nil, "kv", "get", "-f", stack, "carts", "b", "--json")
	var g struct {
		ExpiresAt *int64 `json:"expiresAt"`
	}
	if code != 0 || json.Unmarshal(out, &g) != nil || g.ExpiresAt == nil || *g.ExpiresAt != *sc.Items[1].ExpiresAt {
		t.Errorf("kv get --json b: %s", out)
	}
	if _, out, _ = runIn(t, nil, "kv", "get", "-f", stack, "carts", "a:1", "--json"); !strings.Contains(compactJSON(out), `"expiresAt":null`) {
		t.Errorf("kv get --json a:1 lacks expiresAt null: %s", out)
	}
	if code, out, _ = runIn(t, nil, "kv", "scan", "-f", stack, "carts"); code != 0 || !strings.Contains(string(out), "EXPIRES") || strings.Count(string(out), "\n") != 4 {
		t.Errorf("kv scan table: %d\n%s", code, out)
	}
}

// TestQueueSendDedupKeyAndPeekLastError: queue send --dedup-key adds once
// and says so; queue peek shows the last error.
func TestQueueSendDedupKeyAndPeekLastError(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, goodStack)
	code, out, stderr := runIn(t, nil, "queue", "send", "-f", stack, "orders-dlq", "hello", "--dedup-key", "order:7", "--json")
	if code != 0 || !strings.Contains(compactJSON(out), `"duplicate":false`) || !strings.Contains(compactJSON(out), `"dedupKey":"order:7"`) {
		t.Fatalf("first send: %d %s %s", code, out, stderr)
	}
	code, out, _ = runIn(t, nil, "queue", "send", "-f", stack, "orders-dlq", "hello", "--dedup-key", "order:7")
	if code != 0 || !strings.Contains(string(out), "nothing added") {
		t.Fatalf("second send: %d %s", code, out)
	}
	code, _, stderr = runIn(t, nil, "queue", "send", "-f", stack, "orders-dlq", "x", "--dedup-key", "a b")
	if code != exitUsage || !strings.Contains(stderr, "dedup key") || !strings.Contains(stderr, `"a b"`) {
		t.Fatalf("bad key: %d %s", code, stderr)
	}
	// A handler failure through the library, then peek.
	code, out, _ = runIn(t, nil, "queue", "peek", "-f", stack, "orders-dlq", "--json")
	if code != 0 || strings.Count(string(out), `"id"`) != 1 || !strings.Contains(compactJSON(out), `"lastError":null`) {
		t.Fatalf("peek before a failure: %s", out)
	}
	dir := strings.TrimSuffix(stack, "stack.yaml") + ".localcloud/queue/orders-dlq"
	q, err := queue.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	cctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- q.Consume(cctx, func(context.Context, queue.Message) error {
			cancel()
			return errors.New(`payment "declined"`)
		})
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	code, out, _ = runIn(t, nil, "queue", "peek", "-f", stack, "orders-dlq", "--json")
	if code != 0 || !strings.Contains(compactJSON(out), `"lastError":"payment \"declined\""`) {
		t.Fatalf("peek --json after a failure: %s", out)
	}
	code, out, _ = runIn(t, nil, "queue", "peek", "-f", stack, "orders-dlq")
	if code != 0 || !strings.Contains(string(out), "LAST ERROR") || !strings.Contains(string(out), `"payment \"declined\""`) {
		t.Fatalf("peek after a failure: %s", out)
	}
}

func compactJSON(b []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return string(b)
	}
	return buf.String()
}
