package sqsapi

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/supervisor"
)

// restart closes e's supervisor and starts a new one on the same stack
// file, as a restart of up does.
func (e *env) restart() {
	e.t.Helper()
	file := e.sup.Stack().File
	if err := e.sup.Close(); err != nil {
		e.t.Fatal(err)
	}
	st, err := config.Load(file)
	if err != nil {
		e.t.Fatal(err)
	}
	sup, err := supervisor.Start(e.t.Context(), st, supervisor.Options{HealthInterval: -1, NoWatch: true})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sup.Close() })
	srv, err := New(Options{Source: sup, Endpoint: e.ts.URL})
	if err != nil {
		e.t.Fatal(err)
	}
	e.ts.Config.Handler = srv
	e.sup = sup
}

func (e *env) wantErr(op string, in map[string]any, code, has string) {
	e.t.Helper()
	st, out, qe := e.callJSON(op, in)
	msg, _ := out["message"].(string)
	typ, _ := out["__type"].(string)
	if st != 400 || !strings.HasSuffix(typ, "#"+code) || !strings.Contains(msg, has) {
		e.t.Fatalf("%s %v: %d %s %v, want 400 %s naming %q", op, in, st, qe, out, code, has)
	}
}

func TestCreateQueueOfANewName(t *testing.T) {
	e := newEnv(t)
	dlqURL := strings.TrimSuffix(e.url, "orders") + "orders-dlq"
	out := e.mustJSON("CreateQueue", map[string]any{"QueueName": "jobs-1", "Attributes": map[string]string{
		"VisibilityTimeout": "45", "DelaySeconds": "0", "ReceiveMessageWaitTimeSeconds": "2", "MessageRetentionPeriod": "3600",
		"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:orders-dlq","maxReceiveCount":"3"}`},
		"tags": map[string]string{"team": "a"}})
	u := out["QueueUrl"].(string)
	if !strings.HasSuffix(u, "/000000000000/jobs-1") {
		t.Fatalf("QueueUrl = %v", u)
	}
	if _, err := os.Stat(filepath.Join(e.sup.Stack().DataDir, "queue", "jobs-1")); err != nil {
		t.Fatalf("no store under the dataDir: %v", err)
	}
	b, ok := e.sup.Stack().Binding("jobs-1")
	if !ok || !b.Created || b.VisibilityTimeout != 45*time.Second || b.MaxAttempts != 3 || b.DeadLetter != "orders-dlq" {
		t.Fatalf("binding = %+v, %v", b, ok)
	}
	// The same attributes: its URL; others: QueueNameExists.
	out = e.mustJSON("CreateQueue", map[string]any{"QueueName": "jobs-1", "Attributes": map[string]string{"VisibilityTimeout": "45"}})
	if out["QueueUrl"] != u {
		t.Fatalf("CreateQueue again = %v", out)
	}
	e.wantErr("CreateQueue", map[string]any{"QueueName": "jobs-1", "Attributes": map[string]string{"VisibilityTimeout": "46"}}, "QueueNameExists", "VisibilityTimeout")
	e.wantErr("CreateQueue", map[string]any{"QueueName": "carts"}, "InvalidParameterValue", "kv binding")
	e.wantErr("CreateQueue", map[string]any{"QueueName": "bad name"}, "InvalidParameterValue", "[A-Za-z0-9_-]{1,80}")
	e.wantErr("CreateQueue", map[string]any{"QueueName": strings.Repeat("a", 81)}, "InvalidParameterValue", "1 to 80")
	e.wantErr("CreateQueue", map[string]any{"QueueName": "x", "Attributes": map[string]string{"VisibilityTimeout": "50000"}}, "InvalidAttributeValue", "43200")
	e.wantErr("CreateQueue", map[string]any{"QueueName": "x", "Attributes": map[string]string{"Policy": "{}"}}, "InvalidAttributeName", "Policy")
	e.wantErr("CreateQueue", map[string]any{"QueueName": "x", "tags": map[string]string{"k": strings.Repeat("v", 257)}}, "InvalidParameterValue", "256")
	out = e.mustJSON("GetQueueAttributes", map[string]any{"QueueUrl": u, "AttributeNames": []string{"All"}})
	a := out["Attributes"].(map[string]any)
	if a["VisibilityTimeout"] != "45" || a["ReceiveMessageWaitTimeSeconds"] != "2" || a["MessageRetentionPeriod"] != "3600" ||
		!strings.Contains(a["RedrivePolicy"].(string), "orders-dlq") {
		t.Fatalf("attributes = %v", a)
	}
	out = e.mustJSON("ListDeadLetterSourceQueues", map[string]any{"QueueUrl": dlqURL})
	if fmt.Sprint(out["queueUrls"]) != fmt.Sprint([]any{u, e.url}) {
		t.Fatalf("dead-letter sources = %v", out)
	}
	e.mustJSON("SendMessage", map[string]any{"QueueUrl": u, "MessageBody": "kept"})
	e.mustJSON("TagQueue", map[string]any{"QueueUrl": u, "Tags": map[string]string{"env": "dev"}})
	e.mustJSON("TagQueue", map[string]any{"QueueUrl": e.url, "Tags": map[string]string{"stack": "yes"}})
	e.mustJSON("UntagQueue", map[string]any{"QueueUrl": e.url, "TagKeys": []string{"nope"}})

	e.restart()
	out = e.mustJSON("ListQueueTags", map[string]any{"QueueUrl": u})
	if fmt.Sprint(out["Tags"]) != "map[env:dev team:a]" {
		t.Fatalf("tags after restart = %v", out)
	}
	out = e.mustJSON("ListQueueTags", map[string]any{"QueueUrl": e.url})
	if fmt.Sprint(out["Tags"]) != "map[stack:yes]" {
		t.Fatalf("stack binding's tags after restart = %v", out)
	}
	out = e.mustJSON("ReceiveMessage", map[string]any{"QueueUrl": u})
	if msgs, _ := out["Messages"].([]any); len(msgs) != 1 || msgs[0].(map[string]any)["Body"] != "kept" {
		t.Fatalf("after restart: %v", out)
	}
	out = e.mustJSON("ListQueues", map[string]any{"QueueNamePrefix": "jobs"})
	if fmt.Sprint(out["QueueUrls"]) != fmt.Sprint([]any{u}) {
		t.Fatalf("ListQueues = %v", out)
	}
	// A dead-letter queue with sources, and a stack binding, are not deleted.
	e.wantErr("DeleteQueue", map[string]any{"QueueUrl": dlqURL}, "UnsupportedOperation", "stack file")
	e.mustJSON("DeleteQueue", map[string]any{"QueueUrl": u})
	e.wantErr("GetQueueUrl", map[string]any{"QueueName": "jobs-1"}, "QueueDoesNotExist", "jobs-1")
	if _, err := os.Stat(filepath.Join(e.sup.Stack().DataDir, "queue", "jobs-1")); !os.IsNotExist(err) {
		t.Fatalf("store left after DeleteQueue: %v", err)
	}
	e.restart()
	e.wantErr("GetQueueUrl", map[string]any{"QueueName": "jobs-1"}, "QueueDoesNotExist", "jobs-1")
	// Created again: empty.
	out = e.mustJSON("CreateQueue", map[string]any{"QueueName": "jobs-1"})
	out = e.mustJSON("GetQueueAttributes", map[string]any{"QueueUrl": out["QueueUrl"], "AttributeNames": []string{"ApproximateNumberOfMessages"}})
	if out["Attributes"].(map[string]any)["ApproximateNumberOfMessages"] != "0" {
		t.Fatalf("recreated queue = %v", out)
	}
}

func TestCreateQueueQueryTags(t *testing.T) {
	e := newEnv(t)
	st, body := e.callQuery(url.Values{"Action": {"CreateQueue"}, "QueueName": {"tagged"}, "Tag.1.Key": {"a"}, "Tag.1.Value": {"1"}})
	if st != 200 || !strings.Contains(body, "/000000000000/tagged</QueueUrl>") {
		t.Fatalf("CreateQueue: %d %s", st, body)
	}
	st, body = e.callQuery(url.Values{"Action": {"ListQueueTags"}, "QueueUrl": {e.ts.URL + "/000000000000/tagged"}})
	if st != 200 || !strings.Contains(body, "<Tag><Key>a</Key><Value>1</Value></Tag>") {
		t.Fatalf("ListQueueTags: %d %s", st, body)
	}
	form := url.Values{"Action": {"TagQueue"}, "QueueUrl": {e.url}}
	for i := 1; i <= config.MaxSQSTags+1; i++ {
		form.Set(fmt.Sprintf("Tag.%d.Key", i), fmt.Sprint("k", i))
		form.Set(fmt.Sprintf("Tag.%d.Value", i), "v")
	}
	st, body = e.callQuery(form)
	if st != 400 || !strings.Contains(body, "at most 50 tags, got 51") {
		t.Fatalf("51 tags: %d %s", st, body)
	}
}

// TestCreateDeleteLoop is a test suite's pattern: a queue per test with a
// random name, created and deleted 200 times.
func TestCreateDeleteLoop(t *testing.T) {
	e := newEnv(t)
	var total time.Duration
	const n = 200
	for i := range n {
		name := fmt.Sprintf("t-%d-%d", time.Now().UnixNano(), i)
		start := time.Now()
		out := e.mustJSON("CreateQueue", map[string]any{"QueueName": name})
		total += time.Since(start)
		u := out["QueueUrl"].(string)
		e.mustJSON("SendMessage", map[string]any{"QueueUrl": u, "MessageBody": "x"})
		e.mustJSON("DeleteQueue", map[string]any{"QueueUrl": u})
	}
	t.Logf("CreateQueue: %v mean over %d", total/n, n)
	st, err := config.ReadSQSState(e.sup.Stack().DataDir)
	if err != nil || len(st.Queues) != 0 || len(e.sup.Stack().Bindings) != 3 {
		t.Fatalf("after the loop: %+v, %v, %d bindings", st, err, len(e.sup.Stack().Bindings))
	}
	entries, _ := os.ReadDir(filepath.Join(e.sup.Stack().DataDir, "queue"))
	if len(entries) != 2 {
		t.Fatalf("queue folders left: %d", len(entries))
	}
}

// TestCreatedQueueDelaySeconds: a send without DelaySeconds takes the
// queue's, one with DelaySeconds its own.
func TestCreatedQueueDelaySeconds(t *testing.T) {
	e := newEnv(t)
	u := e.mustJSON("CreateQueue", map[string]any{"QueueName": "slow", "Attributes": map[string]string{"DelaySeconds": "600"}})["QueueUrl"]
	e.mustJSON("SendMessage", map[string]any{"QueueUrl": u, "MessageBody": "later"})
	e.mustJSON("SendMessage", map[string]any{"QueueUrl": u, "MessageBody": "now", "DelaySeconds": 0})
	e.mustJSON("SendMessageBatch", map[string]any{"QueueUrl": u, "Entries": []any{map[string]any{"Id": "a", "MessageBody": "later too"}}})
	a := e.mustJSON("GetQueueAttributes", map[string]any{"QueueUrl": u, "AttributeNames": []string{"All"}})["Attributes"].(map[string]any)
	if a["ApproximateNumberOfMessagesDelayed"] != "2" || a["ApproximateNumberOfMessages"] != "1" || a["DelaySeconds"] != "600" {
		t.Fatalf("attributes = %v", a)
	}
}

// BenchmarkCreateQueue measures a CreateQueue of a new name through the
// JSON protocol, answered once up serves the queue (file stack); the
// DeleteQueue after each is outside the timing.
func BenchmarkCreateQueue(b *testing.B) {
	e := newEnv(b)
	i := 0
	for b.Loop() {
		i++
		out := e.mustJSON("CreateQueue", map[string]any{"QueueName": fmt.Sprint("bench-", i)})
		b.StopTimer()
		e.mustJSON("DeleteQueue", map[string]any{"QueueUrl": out["QueueUrl"]})
		b.StartTimer()
	}
}

// TestDeleteQueueDuringALongPoll: a ReceiveMessage waiting on a queue that
// DeleteQueue deletes answers QueueDoesNotExist, as SQS, not a failure of
// the closed store. (The pause lets the receive start waiting first; in
// the other order the answer must be the same.)
func TestDeleteQueueDuringALongPoll(t *testing.T) {
	e := newEnv(t)
	u := e.mustJSON("CreateQueue", map[string]any{"QueueName": "lp"})["QueueUrl"]
	done := make(chan string, 1)
	go func() {
		st, out, qe := e.callJSON("ReceiveMessage", map[string]any{"QueueUrl": u, "WaitTimeSeconds": 20})
		done <- fmt.Sprint(st, " ", qe, " ", out["message"])
	}()
	time.Sleep(200 * time.Millisecond)
	e.mustJSON("DeleteQueue", map[string]any{"QueueUrl": u})
	if got := <-done; !strings.HasPrefix(got, "400 AWS.SimpleQueueService.NonExistentQueue") {
		t.Fatalf("the waiting receive answered %s", got)
	}
}

// TestRedriveToACreatedQueue: a created queue dead-letters into a stack
// binding, and a redrive of that dead-letter queue moves its messages
// back: the dead-letter queue's handle learns its new origin.
func TestRedriveToACreatedQueue(t *testing.T) {
	e := newEnv(t)
	dlqURL := strings.TrimSuffix(e.url, "orders") + "orders-dlq"
	u := e.mustJSON("CreateQueue", map[string]any{"QueueName": "jobs", "Attributes": map[string]string{
		"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:orders-dlq","maxReceiveCount":1}`}})["QueueUrl"]
	e.mustJSON("SendMessage", map[string]any{"QueueUrl": u, "MessageBody": "m"})
	e.mustJSON("ReceiveMessage", map[string]any{"QueueUrl": u, "VisibilityTimeout": 0})
	e.mustJSON("ReceiveMessage", map[string]any{"QueueUrl": u, "WaitTimeSeconds": 2}) // moves it once it is due again
	count := func(url any) any {
		return e.mustJSON("GetQueueAttributes", map[string]any{"QueueUrl": url, "AttributeNames": []string{"ApproximateNumberOfMessages"}})["Attributes"].(map[string]any)["ApproximateNumberOfMessages"]
	}
	if count(dlqURL) != "1" || count(u) != "0" {
		t.Fatalf("dead-lettered: dlq %v, jobs %v", count(dlqURL), count(u))
	}
	e.mustJSON("StartMessageMoveTask", map[string]any{"SourceArn": "arn:aws:sqs:us-east-1:000000000000:orders-dlq"})
	if count(dlqURL) != "0" || count(u) != "1" {
		t.Fatalf("after the redrive: dlq %v, jobs %v", count(dlqURL), count(u))
	}
}

// TestSetQueueAttributesOfACreatedQueue: a created queue's attributes
// change (kept across a restart); a RedrivePolicy set afterwards
// dead-letters; a cycle is refused; a stack binding's still are not
// changed.
func TestSetQueueAttributesOfACreatedQueue(t *testing.T) {
	e := newEnv(t)
	a := e.mustJSON("CreateQueue", map[string]any{"QueueName": "a"})["QueueUrl"]
	b := e.mustJSON("CreateQueue", map[string]any{"QueueName": "b"})["QueueUrl"]
	e.mustJSON("SetQueueAttributes", map[string]any{"QueueUrl": a, "Attributes": map[string]string{"VisibilityTimeout": "99",
		"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:b","maxReceiveCount":"1"}`}})
	e.wantErr("SetQueueAttributes", map[string]any{"QueueUrl": b, "Attributes": map[string]string{
		"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:a","maxReceiveCount":"1"}`}}, "InvalidAttributeValue", "cycle")
	e.wantErr("SetQueueAttributes", map[string]any{"QueueUrl": a, "Attributes": map[string]string{"QueueArn": "x"}}, "InvalidAttributeName", "QueueArn")
	e.wantErr("SetQueueAttributes", map[string]any{"QueueUrl": e.url, "Attributes": map[string]string{"VisibilityTimeout": "99"}}, "InvalidAttributeValue", "stack file")
	e.restart()
	attrs := e.mustJSON("GetQueueAttributes", map[string]any{"QueueUrl": a, "AttributeNames": []string{"All"}})["Attributes"].(map[string]any)
	if attrs["VisibilityTimeout"] != "99" || !strings.Contains(fmt.Sprint(attrs["RedrivePolicy"]), ":b\"") {
		t.Fatalf("after a restart: %v", attrs)
	}
	e.mustJSON("SendMessage", map[string]any{"QueueUrl": a, "MessageBody": "m"})
	e.mustJSON("ReceiveMessage", map[string]any{"QueueUrl": a, "VisibilityTimeout": 0})
	e.mustJSON("ReceiveMessage", map[string]any{"QueueUrl": a, "WaitTimeSeconds": 2}) // moves it to b once it is due again
	out := e.mustJSON("ReceiveMessage", map[string]any{"QueueUrl": b, "WaitTimeSeconds": 5})
	if msgs, _ := out["Messages"].([]any); len(msgs) != 1 {
		t.Fatalf("b received %v", out)
	}
	e.mustJSON("SetQueueAttributes", map[string]any{"QueueUrl": a, "Attributes": map[string]string{"RedrivePolicy": ""}})
	attrs = e.mustJSON("GetQueueAttributes", map[string]any{"QueueUrl": a, "AttributeNames": []string{"All"}})["Attributes"].(map[string]any)
	if _, has := attrs["RedrivePolicy"]; has {
		t.Fatalf("the policy was not removed: %v", attrs)
	}
	e.mustJSON("DeleteQueue", map[string]any{"QueueUrl": b}) // no source any more
}

// TestCreateQueueOfAnySQSName: SQS names that are no binding names (upper
// case, _, 80 characters) are created, shown under their SQS names
// everywhere the SQS API shows a name, kept case-sensitive, and survive a
// restart; their bindings have derived names.
func TestCreateQueueOfAnySQSName(t *testing.T) {
	e := newEnv(t)
	base := strings.TrimSuffix(e.url, "orders")
	arn := "arn:aws:sqs:us-east-1:000000000000:"
	long := strings.Repeat("Q_", 39) + "zZ" // 80 characters
	names := []string{"Mixed_Case-Name_1", "mixed-case-name-1", "Orders", long}
	for _, n := range names {
		out := e.mustJSON("CreateQueue", map[string]any{"QueueName": n, "tags": map[string]string{"name": n}})
		if out["QueueUrl"] != base+n {
			t.Fatalf("CreateQueue %s: QueueUrl = %v", n, out["QueueUrl"])
		}
	}
	dlq := "Dead_Letters"
	e.mustJSON("CreateQueue", map[string]any{"QueueName": dlq})
	src := "Src_1"
	e.mustJSON("CreateQueue", map[string]any{"QueueName": src, "Attributes": map[string]string{
		"RedrivePolicy": `{"deadLetterTargetArn":"` + arn + dlq + `","maxReceiveCount":1}`}})
	check := func(when string) {
		t.Helper()
		st := e.sup.Stack()
		for _, n := range append(names, dlq, src) {
			bn := config.DeriveBindingName(n)
			b, ok := st.Binding(bn)
			if !ok || !b.Created || b.SQSName() != n {
				t.Fatalf("%s: binding %s of %s = %+v, %v", when, bn, n, b, ok)
			}
			out := e.mustJSON("GetQueueUrl", map[string]any{"QueueName": n})
			if out["QueueUrl"] != base+n {
				t.Fatalf("%s: GetQueueUrl %s = %v", when, n, out)
			}
			out = e.mustJSON("GetQueueAttributes", map[string]any{"QueueUrl": base + n, "AttributeNames": []string{"QueueArn"}})
			if a := out["Attributes"].(map[string]any); a["QueueArn"] != arn+n {
				t.Fatalf("%s: QueueArn of %s = %v", when, n, a)
			}
		}
		if b, _ := st.Binding(config.DeriveBindingName(src)); b.DeadLetter != config.DeriveBindingName(dlq) {
			t.Fatalf("%s: %s dead-letters into binding %q, want %s's", when, src, b.DeadLetter, dlq)
		}
		out := e.mustJSON("GetQueueAttributes", map[string]any{"QueueUrl": base + src, "AttributeNames": []string{"RedrivePolicy"}})
		if rp := out["Attributes"].(map[string]any)["RedrivePolicy"].(string); !strings.Contains(rp, `"`+arn+dlq+`"`) {
			t.Fatalf("%s: RedrivePolicy = %s, want %s's ARN", when, rp, dlq)
		}
		out = e.mustJSON("ListDeadLetterSourceQueues", map[string]any{"QueueUrl": base + dlq})
		if fmt.Sprint(out["queueUrls"]) != fmt.Sprint([]any{base + src}) {
			t.Fatalf("%s: dead-letter sources of %s = %v", when, dlq, out)
		}
		out = e.mustJSON("ListQueues", map[string]any{"QueueNamePrefix": "Mixed"})
		if fmt.Sprint(out["QueueUrls"]) != fmt.Sprint([]any{base + "Mixed_Case-Name_1"}) {
			t.Fatalf("%s: ListQueues Mixed = %v", when, out)
		}
		out = e.mustJSON("ListQueues", map[string]any{"QueueNamePrefix": "Orders"})
		if fmt.Sprint(out["QueueUrls"]) != fmt.Sprint([]any{base + "Orders"}) {
			t.Fatalf("%s: ListQueues Orders = %v (the stack's orders is another queue)", when, out)
		}
		out = e.mustJSON("ListQueueTags", map[string]any{"QueueUrl": base + long})
		if fmt.Sprint(out["Tags"]) != fmt.Sprint(map[string]any{"name": long}) {
			t.Fatalf("%s: tags of the long name = %v", when, out)
		}
		// A derived binding name is no SQS name.
		e.wantErr("GetQueueUrl", map[string]any{"QueueName": config.DeriveBindingName("Orders")}, "QueueDoesNotExist", "does not exist")
	}
	check("created")
	// Case-sensitive: Orders and orders are two queues.
	e.mustJSON("SendMessage", map[string]any{"QueueUrl": base + "Orders", "MessageBody": "upper"})
	e.mustJSON("SendMessage", map[string]any{"QueueUrl": base + long, "MessageBody": "long"})
	out := e.mustJSON("ReceiveMessage", map[string]any{"QueueUrl": e.url})
	if msgs, _ := out["Messages"].([]any); len(msgs) != 0 {
		t.Fatalf("orders received Orders' message: %v", out)
	}
	e.restart()
	check("after a restart")
	for n, body := range map[string]string{"Orders": "upper", long: "long"} {
		out = e.mustJSON("ReceiveMessage", map[string]any{"QueueUrl": base + n})
		if msgs, _ := out["Messages"].([]any); len(msgs) != 1 || msgs[0].(map[string]any)["Body"] != body {
			t.Fatalf("ReceiveMessage %s after restart: %v", n, out)
		}
	}
	e.wantErr("DeleteQueue", map[string]any{"QueueUrl": base + dlq}, "InvalidParameterValue", "queue "+src+" dead-letters into it")
	for _, n := range append(names, src, dlq) {
		e.mustJSON("DeleteQueue", map[string]any{"QueueUrl": base + n})
		e.wantErr("GetQueueUrl", map[string]any{"QueueName": n}, "QueueDoesNotExist", n)
		if _, err := os.Stat(filepath.Join(e.sup.Stack().DataDir, "queue", config.DeriveBindingName(n))); !os.IsNotExist(err) {
			t.Fatalf("store of %s left after DeleteQueue: %v", n, err)
		}
	}
	if _, ok := e.sup.Stack().Binding("orders"); !ok {
		t.Fatal("the stack's orders is gone")
	}

	// A derived binding name that the stack file has is refused, naming it.
	taken := config.DeriveBindingName("Taken_Q")
	file := e.sup.Stack().File
	if err := os.WriteFile(file, []byte(testStack+"  "+taken+":\n    type: queue\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.restart()
	e.wantErr("CreateQueue", map[string]any{"QueueName": "Taken_Q"}, "InvalidParameterValue", "binding name "+taken+" is taken by a queue binding of the stack file")
	e.wantErr("GetQueueUrl", map[string]any{"QueueName": "Taken_Q"}, "QueueDoesNotExist", "Taken_Q")
}
