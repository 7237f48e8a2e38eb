package supervisor

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/config"
)

func createdQueue(name string) config.CreatedQueue {
	return config.CreatedQueue{Name: name, Engine: config.EngineSQLite, VisibilityTimeout: 30, RetentionPeriod: 3600}
}

// TestCreateQueueKeepsTheFileWhenTheReloadFails: a CreateQueue whose
// reload fails (the stack file has a mistake meanwhile) leaves the state
// file as it was and serves nothing new.
func TestCreateQueueKeepsTheFileWhenTheReloadFails(t *testing.T) {
	s, file, _ := start(t, stackText("  orders:", "    type: queue"), Options{NoWatch: true})
	if err := s.CreateQueue(ctx, createdQueue("jobs"), map[string]string{"a": "1"}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(config.SQSStatePath(s.dataDir))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, file, stackText("  orders:", "    type: queue", "    maxAttempts: 0"))
	err = s.CreateQueue(ctx, createdQueue("more"), nil)
	if err == nil || !strings.Contains(err.Error(), "maxAttempts") {
		t.Fatalf("CreateQueue with a broken stack file = %v", err)
	}
	if after := mustRead(t, config.SQSStatePath(s.dataDir)); string(after) != string(before) {
		t.Fatalf("state file changed:\n%s\nwas\n%s", after, before)
	}
	if _, ok := s.Queue("more"); ok {
		t.Fatal("the queue is served")
	}
	if err := s.CreateQueue(ctx, createdQueue("orders"), nil); !errors.Is(err, ErrQueueExists) {
		t.Fatalf("CreateQueue of a stack binding = %v", err)
	}
	if err := s.DeleteQueue(ctx, "orders"); !errors.Is(err, ErrStackBinding) {
		t.Fatalf("DeleteQueue of a stack binding = %v", err)
	}
	if err := s.TagQueue("nope", map[string]string{"a": "b"}, nil); !errors.Is(err, ErrNoSuchQueue) {
		t.Fatalf("TagQueue of no queue = %v", err)
	}
}

// TestReloadReopensWhereMessagesMove: a new dead-letter policy in the
// stack file reopens the queue and its dead-letter queue (up's handles
// carry the policy and the redrive targets); a visibility change does not.
func TestReloadReopensWhereMessagesMove(t *testing.T) {
	s, file, _ := start(t, stackText("  orders:", "    type: queue", "  dlq:", "    type: queue"), Options{NoWatch: true})
	writeFile(t, file, stackText("  orders:", "    type: queue", "    maxAttempts: 3", "    deadLetter: dlq", "  dlq:", "    type: queue", "    visibilityTimeout: 1m"))
	d, err := s.Reload(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(d.Reopened, ",") != "dlq,orders" || len(d.Updated) != 0 {
		t.Fatalf("diff = %+v", d)
	}
	writeFile(t, file, stackText("  orders:", "    type: queue", "    maxAttempts: 3", "    deadLetter: dlq", "  dlq:", "    type: queue"))
	if d, err = s.Reload(ctx, "test"); err != nil || strings.Join(d.Updated, ",") != "dlq" || len(d.Reopened) != 0 {
		t.Fatalf("diff = %+v, %v", d, err)
	}
}
