package sqssdk

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/localcloud/localcloud/bindings/queue"
)

// TestCreatedQueueLifecycle: a queue created through the SQS API (Go SDK,
// JSON protocol) is a persistent queue on the stack's engine, seen by
// status, the CLI, the explorer and a Go app using queue.FromEnv; it keeps
// its messages, attributes and tags across restarts of up; DeleteQueue
// removes it for good, on a file stack and a JetStream stack.
func TestCreatedQueueLifecycle(t *testing.T) {
	for _, name := range []string{"file", "jetstream"} {
		t.Run(name, func(t *testing.T) {
			s := startStack(t, "explorer:\n  listen: 127.0.0.1:0\n", engines[name])
			ctx := ctxOf(t)
			c := s.client()
			const qn = "jobs-created"
			cq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(qn),
				Attributes: map[string]string{"VisibilityTimeout": "40", "ReceiveMessageWaitTimeSeconds": "1",
					"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:orders-dlq","maxReceiveCount":5}`},
				Tags: map[string]string{"team": "blue"}})
			if err != nil {
				t.Fatalf("CreateQueue: %v\n%s", err, s.log())
			}
			u := cq.QueueUrl
			if *u != s.endpoint+"/000000000000/"+qn {
				t.Fatalf("QueueUrl = %s", *u)
			}
			for _, body := range []string{"first", "second"} {
				if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: u, MessageBody: aws.String(body)}); err != nil {
					t.Fatal(err)
				}
			}
			out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: u, WaitTimeSeconds: 5})
			if err != nil || len(out.Messages) != 1 || *out.Messages[0].Body != "first" {
				t.Fatalf("receive = %+v, %v", out, err)
			}
			if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: u, ReceiptHandle: out.Messages[0].ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.TagQueue(ctx, &sqs.TagQueueInput{QueueUrl: u, Tags: map[string]string{"env": "test"}}); err != nil {
				t.Fatal(err)
			}
			// Every tool sees it: status, the CLI, the explorer, FromEnv.
			var st struct {
				Bindings []struct {
					Name, Engine string
					CreatedBySqs bool `json:"createdBySqs"`
				}
			}
			if err := json.Unmarshal([]byte(s.lc(t, "status", "--json")), &st); err != nil {
				t.Fatal(err)
			}
			found := false
			for _, b := range st.Bindings {
				if b.Name == qn {
					found = b.CreatedBySqs && (name == "file") == (b.Engine == "")
				}
			}
			if !found {
				t.Fatalf("status --json: %+v", st)
			}
			if text := s.lc(t, "status"); !strings.Contains(text, "queue (SQS)") {
				t.Fatalf("status does not mark the created queue:\n%s", text)
			}
			if peek := s.lc(t, "queue", "peek", qn); !strings.Contains(peek, "second") {
				t.Fatalf("queue peek:\n%s", peek)
			}
			if stats := s.lc(t, "queue", "stats", qn); !strings.Contains(stats, "1") {
				t.Fatalf("queue stats:\n%s", stats)
			}
			var page struct {
				Messages []struct{ Payload, State string }
			}
			explorerGet(t, s.explorer+"/api/queues/"+qn+"/messages", &page)
			if len(page.Messages) != 1 || page.Messages[0].Payload != "second" {
				t.Fatalf("the explorer shows %+v", page)
			}
			var env map[string]string
			if err := json.Unmarshal([]byte(s.lc(t, "env", "--json")), &env); err != nil {
				t.Fatal(err)
			}
			for k, v := range env {
				t.Setenv(k, v)
			}
			app, err := queue.FromEnv(ctx, qn)
			if err != nil {
				t.Fatal(err)
			}
			if err := app.Send(ctx, queue.Text("from the Go app")); err != nil {
				t.Fatal(err)
			}
			_ = app.Close()

			s.stop(t)
			s.start(t)
			c = s.client()
			u = aws.String(s.endpoint + "/000000000000/" + qn)
			got, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(qn)})
			if err != nil || *got.QueueUrl != *u {
				t.Fatalf("after a restart GetQueueUrl = %v, %v\n%s", got, err, s.log())
			}
			attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: u, AttributeNames: []types.QueueAttributeName{"All"}})
			if err != nil || attrs.Attributes["VisibilityTimeout"] != "40" || attrs.Attributes["ApproximateNumberOfMessages"] != "2" ||
				!strings.Contains(attrs.Attributes["RedrivePolicy"], "orders-dlq") || attrs.Attributes["ReceiveMessageWaitTimeSeconds"] != "1" {
				t.Fatalf("after a restart attributes = %+v, %v", attrs, err)
			}
			tags, err := c.ListQueueTags(ctx, &sqs.ListQueueTagsInput{QueueUrl: u})
			if err != nil || fmt.Sprint(tags.Tags) != "map[env:test team:blue]" {
				t.Fatalf("after a restart tags = %+v, %v", tags, err)
			}
			var bodies []string
			for len(bodies) < 2 {
				out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: u, MaxNumberOfMessages: 10, WaitTimeSeconds: 5})
				if err != nil || len(out.Messages) == 0 {
					t.Fatalf("after a restart receive = %+v, %v (have %v)", out, err, bodies)
				}
				for _, m := range out.Messages {
					bodies = append(bodies, *m.Body)
				}
			}
			if strings.Join(bodies, ",") != "second,from the Go app" {
				t.Fatalf("after a restart: %v", bodies)
			}
			// A stack binding is never deleted.
			if _, err := c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(s.endpoint + "/000000000000/orders")}); apiCode(err) != "AWS.SimpleQueueService.UnsupportedOperation" {
				t.Fatalf("DeleteQueue of a stack binding = %v (%s)", err, apiCode(err))
			}
			if _, err := c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: u}); err != nil {
				t.Fatal(err)
			}
			gone := func(when string) {
				t.Helper()
				if _, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(qn)}); apiCode(err) != "AWS.SimpleQueueService.NonExistentQueue" {
					t.Fatalf("%s: GetQueueUrl = %v (%s)", when, err, apiCode(err))
				}
				if out := s.lc(t, "status", "--json"); strings.Contains(out, qn) {
					t.Fatalf("%s: status shows it:\n%s", when, out)
				}
				cmd := exec.Command(binary, "queue", "peek", qn, "-f", s.file)
				if out, err := cmd.CombinedOutput(); err == nil {
					t.Fatalf("%s: queue peek works:\n%s", when, out)
				}
			}
			gone("after DeleteQueue")
			s.stop(t)
			s.start(t)
			c = s.client()
			gone("after a restart")
			if matches, _ := filepath.Glob(filepath.Join(s.dir, ".localcloud", "queue", qn)); len(matches) != 0 {
				t.Fatalf("store left: %v", matches)
			}
			// Created again, it is empty: the old store (file or stream) is gone.
			cq, err = c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(qn)})
			if err != nil {
				t.Fatal(err)
			}
			attrs, err = c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: cq.QueueUrl, AttributeNames: []types.QueueAttributeName{"All"}})
			if err != nil || attrs.Attributes["ApproximateNumberOfMessages"] != "0" || attrs.Attributes["VisibilityTimeout"] != "30" {
				t.Fatalf("created again: %+v, %v", attrs, err)
			}
			if tags, err := c.ListQueueTags(ctx, &sqs.ListQueueTagsInput{QueueUrl: cq.QueueUrl}); err != nil || len(tags.Tags) != 0 {
				t.Fatalf("created again, tags = %+v, %v", tags, err)
			}
		})
	}
}

// TestCreateQueueLoop is a test suite's pattern: a queue per test with a
// random name, created, used and deleted, 200 times, on both engines.
func TestCreateQueueLoop(t *testing.T) {
	for _, name := range []string{"file", "jetstream"} {
		t.Run(name, func(t *testing.T) {
			s := startStack(t, "", engines[name])
			ctx := ctxOf(t)
			c := s.client()
			const n = 200
			var total time.Duration
			for i := range n {
				start := time.Now()
				cq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(fmt.Sprintf("test-%d-%d", time.Now().UnixNano(), i))})
				total += time.Since(start)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: cq.QueueUrl, MessageBody: aws.String("x")}); err != nil {
					t.Fatal(err)
				}
				if _, err := c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: cq.QueueUrl}); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("CreateQueue through up (%s): %v mean over %d creates", name, total/n, n)
			l, err := c.ListQueues(ctx, &sqs.ListQueuesInput{})
			if err != nil || len(l.QueueUrls) != 2 {
				t.Fatalf("ListQueues after the loop = %+v, %v", l, err)
			}
		})
	}
}

// TestAWSCLICreatedQueue: Debian's AWS CLI (the Query protocol) creates a
// tagged queue, tags and untags it, lists it and deletes it.
func TestAWSCLICreatedQueue(t *testing.T) {
	awsBin := "/usr/bin/aws"
	if _, err := os.Stat(awsBin); err != nil {
		awsBin = need(t, "aws", "Debian's awscli")
	}
	s := startStack(t, "", engines["file"])
	run := func(args ...string) (map[string]any, error) {
		t.Helper()
		cmd := exec.Command(awsBin, append([]string{"--endpoint-url", s.endpoint, "--region", "us-east-1", "--output", "json", "sqs"}, args...)...)
		cmd.Env = append(cleanAWSEnv(), "AWS_ACCESS_KEY_ID=localcloud", "AWS_SECRET_ACCESS_KEY=localcloud", "AWS_PAGER=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("aws sqs %v: %v\n%s", args, err, out)
		}
		m := map[string]any{}
		if len(strings.TrimSpace(string(out))) > 0 {
			if err := json.Unmarshal(out, &m); err != nil {
				return nil, fmt.Errorf("aws sqs %v: %v\n%s", args, err, out)
			}
		}
		return m, nil
	}
	must := func(args ...string) map[string]any {
		t.Helper()
		m, err := run(args...)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	q := must("create-queue", "--queue-name", "cli-made", "--attributes", "VisibilityTimeout=20,DelaySeconds=0", "--tags", "owner=cli")["QueueUrl"].(string)
	must("tag-queue", "--queue-url", q, "--tags", "a=1,b=2")
	must("untag-queue", "--queue-url", q, "--tag-keys", "a")
	if tags := must("list-queue-tags", "--queue-url", q)["Tags"]; fmt.Sprint(tags) != "map[b:2 owner:cli]" {
		t.Fatalf("tags = %v", tags)
	}
	if _, err := run("create-queue", "--queue-name", "cli-made", "--attributes", "VisibilityTimeout=21"); err == nil || !strings.Contains(err.Error(), "QueueAlreadyExists") {
		t.Fatalf("create with other attributes: %v", err)
	}
	if _, err := run("create-queue", "--queue-name", "bad.name"); err == nil || !strings.Contains(err.Error(), "InvalidParameterValue") {
		t.Fatalf("create of an invalid name: %v", err)
	}
	must("send-message", "--queue-url", q, "--message-body", "via the CLI")
	if peek := s.lc(t, "queue", "peek", "cli-made"); !strings.Contains(peek, "via the CLI") {
		t.Fatalf("peek:\n%s", peek)
	}
	if l := must("list-queues", "--queue-name-prefix", "cli-")["QueueUrls"]; fmt.Sprint(l) != fmt.Sprint([]any{q}) {
		t.Fatalf("list-queues = %v", l)
	}
	must("delete-queue", "--queue-url", q)
	if _, err := run("get-queue-url", "--queue-name", "cli-made"); err == nil || !strings.Contains(err.Error(), "NonExistentQueue") {
		t.Fatalf("get-queue-url after delete-queue: %v", err)
	}
}

// TestBoto3CreatedQueue runs testdata/boto3_createq.py under `localcloud
// run` (Debian's boto3 speaks the Query protocol) on both engines; the
// CLI sees the queue it created.
func TestBoto3CreatedQueue(t *testing.T) {
	script, err := filepath.Abs(filepath.Join("testdata", "boto3_createq.py"))
	if err != nil {
		t.Fatal(err)
	}
	for _, py := range pythonsWithBoto3(t) {
		for name, bindings := range engines {
			t.Run(name+"/"+py, func(t *testing.T) {
				t.Parallel()
				s := startStack(t, "", bindings)
				cmd := exec.Command(binary, "run", "-f", s.file, "--", py, script)
				cmd.Dir = s.dir
				cmd.Env = cleanAWSEnv()
				out, err := cmd.CombinedOutput()
				if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok") {
					t.Fatalf("%s: %v\n%s\nup:\n%s", py, err, out, s.log())
				}
				t.Logf("%s", strings.SplitN(string(out), "\n", 2)[0])
				if peek := s.lc(t, "queue", "peek", "py-made"); !strings.Contains(peek, "kept for the CLI") {
					t.Fatalf("the CLI does not see the created queue's message:\n%s", peek)
				}
			})
		}
	}
}

// TestCreatedQueueOfAnySQSName: a test suite's queue names that are no
// binding names (mixed case, _, 80 characters) are created through the Go
// SDK, used, found again after a restart of up under their SQS names, shown
// by status with their derived binding names (which the CLI takes), and
// deleted, on a file stack and a JetStream stack.
func TestCreatedQueueOfAnySQSName(t *testing.T) {
	for _, engine := range []string{"file", "jetstream"} {
		t.Run(engine, func(t *testing.T) {
			s := startStack(t, "", engines[engine])
			ctx := ctxOf(t)
			c := s.client()
			suffix := fmt.Sprintf("%x", time.Now().UnixNano())
			mixed := "Mixed_Case-Name_" + suffix
			long := "Long_" + suffix + "_"
			long += strings.Repeat("x", 80-len(long))
			names := []string{mixed, long, "Orders"} // Orders: not the stack's orders
			for _, n := range names {
				cq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(n), Tags: map[string]string{"n": n}})
				if err != nil {
					t.Fatalf("CreateQueue %s: %v\n%s", n, err, s.log())
				}
				if *cq.QueueUrl != s.endpoint+"/000000000000/"+n {
					t.Fatalf("CreateQueue %s: QueueUrl = %s", n, *cq.QueueUrl)
				}
				if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: cq.QueueUrl, MessageBody: aws.String("to " + n)}); err != nil {
					t.Fatal(err)
				}
			}
			orders := aws.String(s.endpoint + "/000000000000/orders")
			if out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: orders}); err != nil || len(out.Messages) != 0 {
				t.Fatalf("the stack's orders got %+v, %v: Orders and orders must be two queues", out, err)
			}
			// status shows the binding name and the SQS name; the CLI takes the binding name.
			bindingOf := map[string]string{}
			var st struct {
				Bindings []struct {
					Name    string
					SQSName string `json:"sqsName"`
				}
			}
			if err := json.Unmarshal([]byte(s.lc(t, "status", "--json")), &st); err != nil {
				t.Fatal(err)
			}
			for _, b := range st.Bindings {
				if b.SQSName != "" {
					bindingOf[b.SQSName] = b.Name
				}
			}
			for _, n := range names {
				if bindingOf[n] == "" || bindingOf[n] == n {
					t.Fatalf("status --json has no binding of %s with sqsName: %+v", n, st)
				}
				if peek := s.lc(t, "queue", "peek", bindingOf[n]); !strings.Contains(peek, "to "+n[:min(len(n), 20)]) { // peek cuts long payloads
					t.Fatalf("queue peek %s (%s):\n%s", bindingOf[n], n, peek)
				}
			}
			if text := s.lc(t, "status"); !strings.Contains(text, "queue (SQS "+mixed+")") {
				t.Fatalf("status does not show the SQS name %s:\n%s", mixed, text)
			}

			s.stop(t)
			s.start(t)
			c = s.client()
			l, err := c.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String("Mixed_Case-Name_" + suffix)})
			if err != nil || len(l.QueueUrls) != 1 || l.QueueUrls[0] != s.endpoint+"/000000000000/"+mixed {
				t.Fatalf("after a restart ListQueues = %+v, %v\n%s", l, err, s.log())
			}
			for _, n := range names {
				got, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(n)})
				if err != nil || *got.QueueUrl != s.endpoint+"/000000000000/"+n {
					t.Fatalf("after a restart GetQueueUrl %s = %v, %v", n, got, err)
				}
				attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: got.QueueUrl, AttributeNames: []types.QueueAttributeName{"QueueArn"}})
				if err != nil || attrs.Attributes["QueueArn"] != "arn:aws:sqs:us-east-1:000000000000:"+n {
					t.Fatalf("after a restart QueueArn of %s = %+v, %v", n, attrs, err)
				}
				tags, err := c.ListQueueTags(ctx, &sqs.ListQueueTagsInput{QueueUrl: got.QueueUrl})
				if err != nil || tags.Tags["n"] != n {
					t.Fatalf("after a restart tags of %s = %+v, %v", n, tags, err)
				}
				out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: got.QueueUrl, WaitTimeSeconds: 5})
				if err != nil || len(out.Messages) != 1 || *out.Messages[0].Body != "to "+n {
					t.Fatalf("after a restart receive from %s = %+v, %v", n, out, err)
				}
				if _, err := c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: got.QueueUrl}); err != nil {
					t.Fatalf("DeleteQueue %s: %v", n, err)
				}
				if _, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(n)}); apiCode(err) != "AWS.SimpleQueueService.NonExistentQueue" {
					t.Fatalf("after DeleteQueue GetQueueUrl %s = %v (%s)", n, err, apiCode(err))
				}
			}
			if out := s.lc(t, "status", "--json"); strings.Contains(out, "sqsName") {
				t.Fatalf("status after DeleteQueue:\n%s", out)
			}
		})
	}
}
