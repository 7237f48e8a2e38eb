package sqssdk

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/localcloud/localcloud/bindings/queue"
)

// TestGoAppAndSDKShareMessages: a Go app using queue.FromEnv (with the
// environment `localcloud env` gives) and an SDK app reach the same
// messages both ways, on both engines.
func TestGoAppAndSDKShareMessages(t *testing.T) {
	for _, name := range []string{"file", "jetstream"} {
		t.Run(name, func(t *testing.T) {
			s := startStack(t, "", engines[name])
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
			if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String("from the SDK")}); err != nil {
				t.Fatal(err)
			}
			ms, err := app.ReceiveWait(ctx, 10, 5*time.Second)
			if err != nil || len(ms) != 1 || ms[0].Payload.Data != "from the SDK" || ms[0].Payload.Type != queue.TypeText {
				t.Fatalf("the Go app received %+v, %v", ms, err)
			}
			if err := app.Ack(ctx, ms[0].ReceiptHandle); err != nil {
				t.Fatal(err)
			}
			if err := app.Send(ctx, queue.Text("from the Go app")); err != nil {
				t.Fatal(err)
			}
			out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q, WaitTimeSeconds: 5})
			if err != nil || len(out.Messages) != 1 || *out.Messages[0].Body != "from the Go app" {
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
