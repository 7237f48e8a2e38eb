package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/sqlstore"
	"github.com/localcloud/localcloud/internal/testutil"
)

// wantDiskFull fails unless err is LOCAL_FILESYSTEM_ERROR saying the disk
// is full and naming the store.
func wantDiskFull(t *testing.T, what string, err error, store string) {
	t.Helper()
	var be *bindings.Error
	if !errors.As(err, &be) || be.Code != bindings.CodeLocalFilesystemError {
		t.Fatalf("%s: err = %v; want %s", what, err, bindings.CodeLocalFilesystemError)
	}
	for _, w := range []string{"disk is full", store} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error does not say %q: %v", what, w, err)
		}
	}
}

func payload(i int) string { return fmt.Sprintf("m-%04d-%s", i, strings.Repeat("x", 1000)) }

// sendUntilFull sends numbered messages from next on until sends fail in a
// row, and returns the numbers that were sent and the first error.
func sendUntilFull(t *testing.T, q *queue.Queue, next int) (sent []int, first error) {
	t.Helper()
	ctx := context.Background()
	fails := 0
	for i := next; fails < 5; i++ {
		if i-next > 100000 {
			t.Fatal("100000 sends fit on the small disk")
		}
		if err := q.Send(ctx, queue.Text(payload(i))); err != nil {
			if first == nil {
				first = err
			}
			fails++
			continue
		}
		if fails > 0 {
			t.Fatalf("send %d succeeded after %d failed ones on a full disk", i, fails)
		}
		sent = append(sent, i)
	}
	return sent, first
}

// wantMessages fails unless the queue holds exactly the messages numbered
// want, in that order.
func wantMessages(t *testing.T, q *queue.Queue, want []int) {
	t.Helper()
	ms, err := q.Peek(context.Background(), queue.MaxPeekLimit)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) > queue.MaxPeekLimit {
		t.Fatalf("%d messages are more than one Peek shows", len(want))
	}
	if len(ms) != len(want) {
		t.Errorf("queue holds %d messages; want %d", len(ms), len(want))
	}
	for i := range min(len(ms), len(want)) {
		if got := ms[i].Payload.Data; got != payload(want[i]) {
			t.Fatalf("message %d is %.7q; want %.7q", i, got, payload(want[i]))
		}
	}
}

// TestDiskFull fills a small real filesystem under a queue and a KV store:
// every write that cannot fit fails with LOCAL_FILESYSTEM_ERROR naming the
// store and saying the disk is full; nothing committed is lost or damaged;
// the same handles work again once space is freed, and so does a handle
// opened after a close on the full disk.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	disk := filepath.Join(t.TempDir(), "disk")
	testutil.MountSmallDisk(t, disk, 4<<20)
	q, err := queue.Open(ctx, filepath.Join(disk, "q"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = q.Close() }()
	k, err := kv.Open(ctx, filepath.Join(disk, "k"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = k.Close() }()
	filler := filepath.Join(disk, "filler")
	n := testutil.FillDisk(t, filler, 3<<20)

	sent, first := sendUntilFull(t, q, 0)
	t.Logf("%d sends of 1 KB fit beside a %d-byte filler on the 4 MiB disk; then: %v", len(sent), n, first)
	if len(sent) == 0 {
		t.Fatal("no send fit: the filler left no room for the test")
	}
	wantDiskFull(t, "send on a full disk", first, q.Path())
	_, err = k.Put(ctx, "key", []byte(strings.Repeat("v", 4000)))
	t.Logf("kv put on the full disk: %v", err)
	wantDiskFull(t, "put on a full disk", err, k.Path())

	// Receive and ack are writes too.
	ms, err := q.Receive(ctx, 1)
	t.Logf("receive on the full disk: %d messages, %v", len(ms), err)
	if err != nil {
		wantDiskFull(t, "receive on a full disk", err, q.Path())
	}
	var held string // a receipt whose ack failed
	if len(ms) == 1 {
		if ms[0].Payload.Data != payload(sent[0]) {
			t.Errorf("received %.7q; want the first message %.7q", ms[0].Payload.Data, payload(sent[0]))
		}
		err := q.Ack(ctx, ms[0].ReceiptHandle)
		t.Logf("ack on the full disk: %v", err)
		if err != nil {
			wantDiskFull(t, "ack on a full disk", err, q.Path())
			held = ms[0].ReceiptHandle
		} else {
			sent = sent[1:]
		}
	}
	wantMessages(t, q, sent)

	// Free the space: the same handles work again.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := q.Send(ctx, queue.Text(payload(10000+i))); err != nil {
			t.Fatalf("send after freeing space: %v", err)
		}
		sent = append(sent, 10000+i)
	}
	if _, ok, err := k.Get(ctx, "key"); err != nil || ok {
		t.Errorf("the put that failed on the full disk: get = found %v, %v; want absent", ok, err)
	}
	if _, err := k.Put(ctx, "key", []byte("v")); err != nil {
		t.Fatalf("put after freeing space: %v", err)
	}
	if held != "" {
		if err := q.Ack(ctx, held); err != nil {
			t.Fatalf("ack, after freeing space, of the message whose ack failed: %v", err)
		}
		sent = sent[1:]
	}
	wantMessages(t, q, sent)

	// Fill the disk again and close the queue on it: SQLite cannot
	// checkpoint, so the -wal and -shm stay. The next open recovers them.
	n = testutil.FillDisk(t, filler, 8<<20)
	more, first := sendUntilFull(t, q, 20000)
	t.Logf("full again (filler %d bytes): %d more sends fit, then %v", n, len(more), first)
	wantDiskFull(t, "send on the full disk again", first, q.Path())
	sent = append(sent, more...)
	if err := q.Close(); err != nil {
		t.Logf("close on the full disk: %v", err)
	}
	for _, side := range []string{"-wal", "-shm"} {
		if fi, err := os.Stat(q.Path() + side); err == nil {
			t.Logf("after the close on the full disk %s%s has %d bytes", filepath.Base(q.Path()), side, fi.Size())
		}
	}
	q, err = queue.Open(ctx, filepath.Join(disk, "q"))
	t.Logf("open on the full disk: %v", err)
	if err != nil {
		wantDiskFull(t, "open on a full disk", err, filepath.Join(disk, "q", sqlitequeue.FileName))
	} else {
		wantMessages(t, q, sent)
		_ = q.Close()
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	q, err = queue.Open(ctx, filepath.Join(disk, "q"))
	if err != nil {
		t.Fatalf("open after freeing space: %v", err)
	}
	wantMessages(t, q, sent)
	if err := q.Send(ctx, queue.Text(payload(30000))); err != nil {
		t.Fatalf("send after reopening: %v", err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		path string
		f    sqlstore.Format
	}{{q.Path(), sqlitequeue.Format()}, {k.Path(), sqlitekv.Format()}} {
		if v := verify(t, s.path, s.f); !v.OK() {
			t.Errorf("%s after the full disk: %v", s.path, v.Problems)
		}
	}
}

// TestDiskFullAtCreate: creating a store on a full disk fails with
// LOCAL_FILESYSTEM_ERROR, and what it leaves behind does not get in the
// way: the next open, with space, creates the store.
func TestDiskFullAtCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	disk := filepath.Join(t.TempDir(), "disk")
	testutil.MountSmallDisk(t, disk, 1<<20)
	filler := filepath.Join(disk, "filler")
	testutil.FillDisk(t, filler, 2<<20)
	dir := filepath.Join(disk, "q")
	_, err := queue.Open(ctx, dir)
	t.Logf("create on the full disk: %v", err)
	wantDiskFull(t, "create on a full disk", err, filepath.Join(dir, sqlitequeue.FileName))
	es, _ := os.ReadDir(dir)
	for _, e := range es {
		fi, _ := e.Info()
		t.Logf("left behind: %s (%d bytes)", e.Name(), fi.Size())
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	q, err := queue.Open(ctx, dir)
	if err != nil {
		t.Fatalf("open after freeing space: %v", err)
	}
	if err := q.Send(ctx, queue.Text("first")); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if v := verify(t, filepath.Join(dir, sqlitequeue.FileName), sqlitequeue.Format()); !v.OK() {
		t.Errorf("store created after the full disk: %v", v.Problems)
	}
}
