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

// TestCreateQueueNeverAliasesADerivedBindingName: a queue whose SQS name
// is no binding name is served under its derived binding name; one whose
// derived name the stack file or another created queue has is refused
// with ErrBindingTaken naming the holder, and the state file is unchanged.
func TestCreateQueueNeverAliasesADerivedBindingName(t *testing.T) {
	taken := config.DeriveBindingName("Taken_Q")
	s, _, _ := start(t, stackText("  orders:", "    type: queue", "  "+taken+":", "    type: queue"), Options{NoWatch: true})
	if err := s.CreateQueue(ctx, createdQueue("Mixed_Q"), map[string]string{"a": "1"}); err != nil {
		t.Fatal(err)
	}
	bn := config.DeriveBindingName("Mixed_Q")
	if _, ok := s.Queue(bn); !ok {
		t.Fatalf("Mixed_Q is not served as %s", bn)
	}
	if b, ok := s.Stack().SQSQueue("Mixed_Q"); !ok || b.Name != bn {
		t.Fatalf("SQSQueue(Mixed_Q) = %+v, %v", b, ok)
	}
	if tags, err := s.QueueTags(bn); err != nil || tags["a"] != "1" {
		t.Fatalf("tags of %s = %v, %v", bn, tags, err)
	}
	if err := s.CreateQueue(ctx, createdQueue("Mixed_Q"), nil); !errors.Is(err, ErrQueueExists) {
		t.Fatalf("CreateQueue of Mixed_Q again = %v", err)
	}
	before := mustRead(t, config.SQSStatePath(s.dataDir))
	err := s.CreateQueue(ctx, createdQueue("Taken_Q"), nil)
	if !errors.Is(err, config.ErrBindingTaken) || !strings.Contains(err.Error(), "binding name "+taken+" is taken by a queue binding of the stack file") {
		t.Fatalf("CreateQueue of Taken_Q = %v, want ErrBindingTaken naming the stack file's %s", err, taken)
	}
	// Another created queue holding the name (a file written by hand).
	other := createdQueue("holder")
	q := createdQueue("Held_Q")
	other.Name = config.DeriveBindingName("Held_Q")
	if err := s.CreateQueue(ctx, other, nil); err != nil {
		t.Fatal(err)
	}
	err = s.CreateQueue(ctx, q, nil)
	if !errors.Is(err, config.ErrBindingTaken) || !strings.Contains(err.Error(), "taken by queue "+other.Name) {
		t.Fatalf("CreateQueue of Held_Q = %v, want ErrBindingTaken naming queue %s", err, other.Name)
	}
	if err := s.DeleteQueue(ctx, other.Name); err != nil {
		t.Fatal(err)
	}
	if after := mustRead(t, config.SQSStatePath(s.dataDir)); string(after) != string(before) {
		t.Fatalf("state file changed:\n%s\nwas\n%s", after, before)
	}
	if err := s.DeleteQueue(ctx, bn); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Queue(bn); ok {
		t.Fatal("Mixed_Q is served after DeleteQueue")
	}
}
