package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/config"
)

const sqsStack = `version: 1
name: shop
bindings:
  orders:
    type: queue
  carts:
    type: kv
`

func writeState(t *testing.T, dir, content string) {
	t.Helper()
	data := filepath.Join(dir, ".localcloud")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, config.SQSStateFile), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCreatedQueuesMergeIntoTheStack(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, ".localcloud")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	st := config.SQSState{Queues: []config.CreatedQueue{
		{Name: "jobs", Engine: config.EngineSQLite, VisibilityTimeout: 45, RetentionPeriod: 3600, DelaySeconds: 5, Created: 7,
			MaxReceiveCount: 3, DeadLetter: "orders"},
		{Name: "orders", Engine: config.EngineSQLite, VisibilityTimeout: 10, RetentionPeriod: 3600}, // shadowed: the stack file wins
	}, Tags: map[string]map[string]string{"orders": {"k": "v"}}}
	if err := config.WriteSQSState(data, st); err != nil {
		t.Fatal(err)
	}
	s, err := parseIn(t, dir, sqsStack)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Bindings) != 3 {
		t.Fatalf("bindings = %+v", s.Bindings)
	}
	j, ok := s.Binding("jobs")
	want := config.Binding{Name: "jobs", Type: config.TypeQueue, Engine: config.EngineSQLite, Path: filepath.Join(data, "queue", "jobs"),
		VisibilityTimeout: 45 * time.Second, Durability: config.DurabilityNormal, MaxAttempts: 3, DeadLetter: "orders",
		RetryDelay: config.DefaultRetryDelay, MaxRetryDelay: config.DefaultMaxRetryDelay, DedupWindow: config.DefaultDedupWindow,
		Created: true, SQS: config.SQSAttrs{DelaySeconds: 5, RetentionSeconds: 3600, Created: 7}}
	if !ok || *j != want {
		t.Fatalf("jobs = %+v\nwant   %+v", j, want)
	}
	if o, _ := s.Binding("orders"); o.Created || o.VisibilityTimeout != config.DefaultVisibilityTimeout {
		t.Fatalf("the stack file's orders = %+v", o)
	}
	if got := s.DeadLetterOrigins("orders"); len(got) != 1 || got[0].Name != "jobs" {
		t.Fatalf("dead-letter origins of orders = %+v", got)
	}
	back, err := config.ReadSQSState(data)
	if err != nil || len(back.Queues) != 2 || back.Tags["orders"]["k"] != "v" {
		t.Fatalf("read back = %+v, %v", back, err)
	}
}

func TestSQSStateFileIsUntrusted(t *testing.T) {
	q := `{"name":"jobs","engine":"sqlite","visibilityTimeout":30,"messageRetentionPeriod":345600`
	for _, c := range []struct{ content, want string }{
		{`garbage`, "not the JSON localcloud writes"},
		{`{"version":2,"queues":[]}`, "version must be 1, got 2"},
		{`{"version":1,"queues":[` + q + `,"name":"bad name"}]}`, `must match [A-Za-z0-9_-]{1,80}`},
		{`{"version":1,"queues":[` + q + `,"name":"Bad_Name"}]}`, `binding must be set (to a name matching [a-z][a-z0-9-]{0,62})`},
		{`{"version":1,"queues":[` + q + `,"name":"Bad_Name","binding":"Bad_Name"}]}`, `binding must match [a-z][a-z0-9-]{0,62}`},
		{`{"version":1,"queues":[` + q + `,"binding":"jobs"}]}`, `binding must be left out when the name is a binding name, got "jobs"`},
		{`{"version":1,"queues":[` + q + `,"name":"Bad_Name","binding":"orders"}]}`, `binding must be ` + config.DeriveBindingName("Bad_Name") + ` (derived from the name), got "orders"`},
		{`{"version":1,"queues":[` + q + `,"maxReceiveCount":3,"deadLetter":"Not_A_Binding"}]}`, `deadLetter must be a binding name`},
		{`{"version":1,"queues":[` + q + `,"visibilityTimeout":0}]}`, "VisibilityTimeout must be 1 to 43200, got 0"},
		{`{"version":1,"queues":[` + q + `,"delaySeconds":901}]}`, "DelaySeconds must be 0 to 900, got 901"},
		{`{"version":1,"queues":[` + q + `,"engine":"memory"}]}`, `engine must be sqlite or jetstream, got "memory"`},
		{`{"version":1,"queues":[` + q + `},` + q + `}]}`, "name jobs appears twice"},
		{`{"version":1,"queues":[` + q + `,"maxReceiveCount":3}]}`, "RedrivePolicy needs both"},
		{`{"version":1,"queues":[` + q + `,"maxReceiveCount":3,"deadLetter":"gone"}]}`, "dead-letter queue gone is no queue of the stack"},
		{`{"version":1,"queues":[` + q + `,"maxReceiveCount":3,"deadLetter":"carts"}]}`, "dead-letter queue carts is no queue"},
		{`{"version":1,"queues":[],"tags":{"orders":{"":"v"}}}`, "a tag key is 1 to 128 characters, got 0"},
		{`{"version":1,"queues":[` + q + `,"name":"a","maxReceiveCount":1,"deadLetter":"b"},` + q + `,"name":"b","maxReceiveCount":1,"deadLetter":"a"}]}`, "dead-letter cycle"},
	} {
		dir := t.TempDir()
		writeState(t, dir, c.content)
		_, err := parseIn(t, dir, sqsStack)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), config.SQSStateFile) {
			t.Errorf("%s: err = %v, want it to name %s and say %q", c.content, err, config.SQSStateFile, c.want)
		}
	}
}

func TestSQSStateFileMustBeARegularFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".localcloud", config.SQSStateFile), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := parseIn(t, dir, sqsStack)
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("err = %v", err)
	}
}

func TestDeriveBindingName(t *testing.T) {
	long := strings.Repeat("Ab_", 26) + "xy" // 80 characters
	seen := map[string]string{}
	for _, n := range []string{"orders", "a-b", "A_b", "a_b", "A-B", "Orders", "ORDERS", "1abc", "_x", "-", "9", long, long[:79] + "z"} {
		b := config.DeriveBindingName(n)
		if !config.IsBindingName(b) {
			t.Errorf("DeriveBindingName(%q) = %q, no binding name", n, b)
		}
		if other, ok := seen[b]; ok {
			t.Errorf("DeriveBindingName(%q) = DeriveBindingName(%q) = %q", n, other, b)
		}
		seen[b] = n
		if again := config.DeriveBindingName(n); again != b {
			t.Errorf("DeriveBindingName(%q) = %q then %q: not stable", n, b, again)
		}
	}
	if b := config.DeriveBindingName("a-b"); b != "a-b" {
		t.Errorf("a binding name must stay itself, got %q", b)
	}
	if b := config.DeriveBindingName("TestOrders_1a2B"); !strings.HasPrefix(b, "testorders-1a2b-") || len(b) != len("testorders-1a2b-")+8 {
		t.Errorf("DeriveBindingName(TestOrders_1a2B) = %q, want testorders-1a2b- and an 8-character hash", b)
	}
	if b := config.DeriveBindingName("1abc"); !strings.HasPrefix(b, "q-1abc-") {
		t.Errorf("DeriveBindingName(1abc) = %q, want a letter first (q-1abc-...)", b)
	}
}

// TestSQSNamesThatAreNoBindingNames: a created queue whose SQS name is no
// binding name is served under its derived binding name, found by its SQS
// name (case-sensitive); a stack binding that takes the derived name is a
// problem, never an alias.
func TestSQSNamesThatAreNoBindingNames(t *testing.T) {
	dir := t.TempDir()
	bn := config.DeriveBindingName("Orders")
	q := `"engine":"sqlite","visibilityTimeout":30,"messageRetentionPeriod":345600`
	writeState(t, dir, `{"version":1,"queues":[{"name":"Orders","binding":"`+bn+`",`+q+`,"maxReceiveCount":2,"deadLetter":"orders"}],"tags":{"`+bn+`":{"k":"v"}}}`)
	s, err := parseIn(t, dir, sqsStack)
	if err != nil {
		t.Fatal(err)
	}
	b, ok := s.Binding(bn)
	if !ok || !b.Created || b.SQS.Name != "Orders" || b.SQSName() != "Orders" || b.DeadLetter != "orders" ||
		b.Path != filepath.Join(dir, ".localcloud", "queue", bn) {
		t.Fatalf("binding %s = %+v, %v", bn, b, ok)
	}
	if got, ok := s.SQSQueue("Orders"); !ok || got.Name != bn {
		t.Fatalf("SQSQueue(Orders) = %+v, %v", got, ok)
	}
	if got, ok := s.SQSQueue("orders"); !ok || got.Name != "orders" || got.Created {
		t.Fatalf("SQSQueue(orders) = %+v, %v; want the stack's orders", got, ok)
	}
	if _, ok := s.SQSQueue(bn); ok {
		t.Fatalf("SQSQueue(%s) found the queue by its binding name; its SQS name is Orders", bn)
	}
	if _, ok := s.SQSQueue("carts"); ok {
		t.Fatal("SQSQueue(carts) found a kv binding")
	}
	if got := s.DeadLetterOrigins("orders"); len(got) != 1 || got[0].Name != bn {
		t.Fatalf("dead-letter origins of orders = %+v", got)
	}

	taken := strings.Replace(sqsStack, "bindings:", "bindings:\n  "+bn+":\n    type: queue", 1)
	if !strings.Contains(taken, bn+":") {
		t.Fatalf("test stack has no bindings: section:\n%s", sqsStack)
	}
	_, err = parseIn(t, dir, taken)
	if err == nil || !strings.Contains(err.Error(), "its binding name "+bn+" is a binding of the stack file") {
		t.Fatalf("a stack binding named %s: err = %v, want a problem", bn, err)
	}
}
