package sqssdk

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/localcloud/localcloud/bindings/queue"
)

// TestGoAppAndSDKShareMessages: a Go app using queue.FromEnv (with the
// environment `localcloud env` gives), the explorer and an SDK app reach
// the same messages both ways, on both engines.
func TestGoAppAndSDKShareMessages(t *testing.T) {
	for _, name := range []string{"file", "jetstream"} {
		t.Run(name, func(t *testing.T) {
			s := startStack(t, "explorer:\n  listen: 127.0.0.1:0\n", engines[name])
			var env map[string]string
			if err := json.Unmarshal([]byte(s.lc(t, "env", "--json")), &env); err != nil {
				t.Fatal(err)
			}
			for k, v := range env {
				t.Setenv(k, v)
			}
			ctx := ctxOf(t)
			app, err := queue.FromEnv(ctx, "orders")
			if err != nil {
				t.Fatal(err)
			}
			defer app.Close()
			c := s.client()
			q := aws.String(s.endpoint + "/000000000000/orders")
			if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String("from the SDK"),
				MessageAttributes: map[string]types.MessageAttributeValue{"kind": {DataType: aws.String("String"), StringValue: aws.String("order")}}}); err != nil {
				t.Fatal(err)
			}
			// The explorer shows it, unclaimed.
			var page struct {
				Messages []struct {
					Payload, State string
					Attributes     queue.Attributes
				}
			}
			explorerGet(t, s.explorer+"/api/queues/orders/messages", &page)
			if len(page.Messages) != 1 || page.Messages[0].Payload != "from the SDK" || page.Messages[0].State != "due" ||
				page.Messages[0].Attributes["kind"].String != "order" {
				t.Fatalf("the explorer shows %+v", page)
			}
			ms, err := app.ReceiveWait(ctx, 10, 5*time.Second)
			if err != nil || len(ms) != 1 || ms[0].Payload.Data != "from the SDK" || ms[0].Payload.Type != queue.TypeText ||
				ms[0].Attributes["kind"].Type != "String" || ms[0].Attributes["kind"].String != "order" {
				t.Fatalf("the Go app received %+v, %v", ms, err)
			}
			if err := app.Ack(ctx, ms[0].ReceiptHandle); err != nil {
				t.Fatal(err)
			}
			if err := app.Send(ctx, queue.Text("from the Go app"), queue.WithAttributes(queue.Attributes{"n": {Type: "Number", String: "7"}})); err != nil {
				t.Fatal(err)
			}
			out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q, WaitTimeSeconds: 5, MessageAttributeNames: []string{"All"}})
			if err != nil || len(out.Messages) != 1 || *out.Messages[0].Body != "from the Go app" || *out.Messages[0].MessageAttributes["n"].StringValue != "7" {
				t.Fatalf("the SDK received %+v, %v", out, err)
			}
			if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q, ReceiptHandle: out.Messages[0].ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
			// A message sent from the explorer reaches the SDK.
			var sess struct {
				CSRF string `json:"csrfToken"`
			}
			explorerGet(t, s.explorer+"/api/session", &sess)
			req, _ := http.NewRequest(http.MethodPost, s.explorer+"/api/queues/orders/send", strings.NewReader(`{"type":"text","data":"from the explorer"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-CSRF-Token", sess.CSRF)
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("explorer send: %v %v", resp, err)
			}
			resp.Body.Close()
			out, err = c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q, WaitTimeSeconds: 5})
			if err != nil || len(out.Messages) != 1 || *out.Messages[0].Body != "from the explorer" {
				t.Fatalf("the SDK received %+v, %v", out, err)
			}
			if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q, ReceiptHandle: out.Messages[0].ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
			if st, err := app.Stats(ctx); err != nil || st.Total != 0 {
				t.Fatalf("stats after both deletes: %+v, %v", st, err)
			}
		})
	}
}

// explorerGet decodes the JSON of a GET of the explorer's API into v.
func explorerGet(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
