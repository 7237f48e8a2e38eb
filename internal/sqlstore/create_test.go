package sqlstore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/testutil"
)

const createDirEnv = "LOCALCLOUD_TEST_CREATE_DIR"

// TestCreateHelper is the helper process of TestManyProcessesCreateOneStore:
// it says "ready", waits for "go" on stdin, then opens (creating) the queue
// and the KV store in its directory, writes one message and one key, and
// says "ok" or the error.
func TestCreateHelper(t *testing.T) {
	dir := os.Getenv(createDirEnv)
	if dir == "" {
		t.Skip("helper process of TestManyProcessesCreateOneStore")
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	if !sc.Scan() {
		os.Exit(2)
	}
	ctx := context.Background()
	err := func() error {
		q, err := queue.Open(ctx, filepath.Join(dir, "q"))
		if err != nil {
			return err
		}
		defer q.Close()
		if err := q.Send(ctx, queue.Text(fmt.Sprint(os.Getpid()))); err != nil {
			return err
		}
		s, err := kv.Open(ctx, filepath.Join(dir, "kv"))
		if err != nil {
			return err
		}
		defer s.Close()
		_, err = s.Put(ctx, fmt.Sprint(os.Getpid()), []byte("v"))
		return err
	}()
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("ok")
	os.Exit(0)
}

// TestManyProcessesCreateOneStore: app processes started together against
// a store that does not exist yet (workers launched at once, without up)
// all open it, and every write lands.
func TestManyProcessesCreateOneStore(t *testing.T) {
	t.Parallel()
	const procs = 8
	for round := range 3 {
		dir := t.TempDir()
		var cs []*testutil.Child
		for i := range procs {
			c := testutil.StartChild(t, fmt.Sprintf("creator %d", i), "TestCreateHelper", createDirEnv+"="+dir)
			c.Expect(t, "ready", time.Minute)
			cs = append(cs, c)
		}
		for _, c := range cs {
			c.Send(t, "go")
		}
		for _, c := range cs {
			if line := <-c.Lines; line != "ok" {
				t.Errorf("round %d: %s: %s", round, c.Name, line)
			}
		}
		ctx := context.Background()
		q, err := queue.Open(ctx, filepath.Join(dir, "q"))
		if err != nil {
			t.Fatal(err)
		}
		st, err := q.Stats(ctx)
		q.Close()
		if err != nil || st.Total != procs {
			t.Errorf("round %d: queue stats %+v, %v; want %d messages", round, st, err, procs)
		}
		s, err := kv.Open(ctx, filepath.Join(dir, "kv"))
		if err != nil {
			t.Fatal(err)
		}
		page, err := s.Scan(ctx, "", 100, "")
		s.Close()
		if err != nil || len(page.Items) != procs {
			t.Errorf("round %d: kv scan %d keys, %v; want %d", round, len(page.Items), err, procs)
		}
	}
}
