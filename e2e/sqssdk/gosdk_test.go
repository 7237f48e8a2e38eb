package sqssdk

import (
	"io"
	"net/http"

	"encoding/json"
	"errors"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// engines are the bindings of the SDK tests, on each engine: a queue whose
// messages go to a dead-letter queue after 2 receives.
var engines = map[string]string{
	"file": `  orders:
    type: queue
    maxAttempts: 2
    deadLetter: orders-dlq
  orders-dlq:
    type: queue
`,
	"jetstream": `  orders:
    type: queue
    engine: jetstream
    maxAttempts: 2
    deadLetter: orders-dlq
  orders-dlq:
    type: queue
    engine: jetstream
`,
}

// apiCode is the error code of an SDK error; "" for none.
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// TestGoSDK drives the SQS API with aws-sdk-go-v2 (JSON protocol; the SDK
// checks MD5OfMessageBody of every send and receive) on a file binding and
// on a JetStream binding, with the localcloud CLI (another process, the
// public queue API) seeing the same messages both ways.
func TestGoSDK(t *testing.T) {
	for name, bindings := range engines {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := startStack(t, "", bindings)
			c := s.client()
			ctx := ctxOf(t)

			url, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("orders")})
			if err != nil {
				t.Fatal(err)
			}
			q := url.QueueUrl
			if want := s.endpoint + "/000000000000/orders"; *q != want {
				t.Fatalf("QueueUrl = %s, want %s", *q, want)
			}
			hello, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String("hello ünïcode")})
			if err != nil {
				t.Fatal(err)
			}
			batch, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: q, Entries: []types.SendMessageBatchRequestEntry{
				{Id: aws.String("a"), MessageBody: aws.String("one")},
				{Id: aws.String("b"), MessageBody: aws.String("two")},
			}})
			if err != nil || len(batch.Successful) != 2 || len(batch.Failed) != 0 {
				t.Fatalf("SendMessageBatch = %+v, %v", batch, err)
			}
			// The CLI (the public queue API in another process) sees them.
			peek := s.lc(t, "queue", "peek", "orders")
			for _, body := range []string{"hello ünïcode", "one", "two"} {
				if !strings.Contains(peek, body) {
					t.Fatalf("queue peek lacks %q:\n%s", body, peek)
				}
			}
			// And a message the CLI sends reaches the SDK.
			s.lc(t, "queue", "send", "orders", "from the CLI")

			var got []types.Message
			for len(got) < 4 {
				out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q, MaxNumberOfMessages: 10, WaitTimeSeconds: 5,
					VisibilityTimeout: 60, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
				if err != nil {
					t.Fatal(err)
				}
				if len(out.Messages) == 0 {
					t.Fatalf("ReceiveMessage gave nothing after %d messages", len(got))
				}
				got = append(got, out.Messages...)
			}
			// Every receive shows the MessageId the send answered.
			sentIDs := map[string]string{"hello ünïcode": *hello.MessageId}
			for _, e := range batch.Successful {
				sentIDs[map[string]string{"a": "one", "b": "two"}[*e.Id]] = *e.MessageId
			}
			bodies := map[string]types.Message{}
			for _, m := range got {
				if want, ok := sentIDs[*m.Body]; ok && *m.MessageId != want {
					t.Errorf("%q received with MessageId %s; its send answered %s", *m.Body, *m.MessageId, want)
				}
				bodies[*m.Body] = m
				if m.Attributes["ApproximateReceiveCount"] != "1" || m.Attributes["SentTimestamp"] == "" {
					t.Errorf("attributes of %q = %v", *m.Body, m.Attributes)
				}
			}
			if len(bodies) != 4 || bodies["from the CLI"].Body == nil {
				t.Fatalf("received %v", bodies)
			}
			one := bodies["one"]
			// Visible again at once, received again: the first receipt is stale.
			if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: q, ReceiptHandle: one.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
				t.Fatal(err)
			}
			again, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q, WaitTimeSeconds: 5,
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
			if err != nil || len(again.Messages) != 1 || *again.Messages[0].Body != "one" || *again.Messages[0].MessageId != *one.MessageId ||
				again.Messages[0].Attributes["ApproximateReceiveCount"] != "2" {
				t.Fatalf("second delivery = %+v, %v", again, err)
			}
			_, err = c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q, ReceiptHandle: one.ReceiptHandle})
			if apiCode(err) != "InvalidParameterValue" || !strings.Contains(err.Error(), "expired") {
				t.Fatalf("DeleteMessage with a stale receipt = %v", err)
			}
			del, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: q, Entries: []types.DeleteMessageBatchRequestEntry{
				{Id: aws.String("stale"), ReceiptHandle: one.ReceiptHandle},
				{Id: aws.String("garbage"), ReceiptHandle: aws.String("not-a-receipt")},
				{Id: aws.String("two"), ReceiptHandle: bodies["two"].ReceiptHandle},
			}})
			if err != nil {
				t.Fatal(err)
			}
			failed := map[string]string{}
			for _, f := range del.Failed {
				failed[*f.Id] = *f.Code
			}
			if len(del.Successful) != 1 || *del.Successful[0].Id != "two" || failed["stale"] != "InvalidParameterValue" || failed["garbage"] != "ReceiptHandleIsInvalid" {
				t.Fatalf("DeleteMessageBatch = ok %+v failed %v", del.Successful, failed)
			}
			for _, r := range []*string{again.Messages[0].ReceiptHandle, bodies["hello ünïcode"].ReceiptHandle, bodies["from the CLI"].ReceiptHandle} {
				if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q, ReceiptHandle: r}); err != nil {
					t.Fatal(err)
				}
			}
			attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
			if err != nil {
				t.Fatal(err)
			}
			if attrs.Attributes["ApproximateNumberOfMessages"] != "0" || attrs.Attributes["ApproximateNumberOfMessagesNotVisible"] != "0" ||
				attrs.Attributes["MaximumMessageSize"] != "65536" || !strings.Contains(attrs.Attributes["RedrivePolicy"], `"maxReceiveCount":2`) {
				t.Fatalf("attributes = %v", attrs.Attributes)
			}

			// Dead letters after maxReceiveCount, then a redrive back; the
			// message keeps its attributes throughout (the SDK checks their
			// MD5 on every send and receive).
			poisonAttrs := map[string]types.MessageAttributeValue{
				"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme ünï")},
				"weight": {DataType: aws.String("Number.float"), StringValue: aws.String("-12.5e3")},
				"thumb":  {DataType: aws.String("Binary.png"), BinaryValue: []byte{0x89, 'P', 'N', 'G', 0}},
			}
			trace := "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"
			sent, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String("poison"), MessageAttributes: poisonAttrs,
				MessageSystemAttributes: map[string]types.MessageSystemAttributeValue{"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String(trace)}}})
			if err != nil || sent.MD5OfMessageAttributes == nil || sent.MD5OfMessageSystemAttributes == nil {
				t.Fatalf("SendMessage with attributes = %+v, %v", sent, err)
			}
			wantAttrs := func(how string, m types.Message) {
				t.Helper()
				if len(m.MessageAttributes) != 3 || *m.MessageAttributes["tenant"].StringValue != "acme ünï" ||
					*m.MessageAttributes["weight"].DataType != "Number.float" || string(m.MessageAttributes["thumb"].BinaryValue) != "\x89PNG\x00" ||
					m.Attributes["AWSTraceHeader"] != trace || *m.MD5OfMessageAttributes != *sent.MD5OfMessageAttributes {
					t.Fatalf("%s: attributes %v, system %v", how, m.MessageAttributes, m.Attributes)
				}
			}
			if peek := s.lc(t, "queue", "peek", "orders", "--json"); !strings.Contains(peek, `"tenant":`) || !strings.Contains(peek, `"AWS.AWSTraceHeader":`) {
				t.Fatalf("queue peek --json lacks the attributes:\n%s", peek)
			}
			withAttrs := func(in *sqs.ReceiveMessageInput) *sqs.ReceiveMessageInput {
				in.MessageAttributeNames = []string{"All"}
				in.MessageSystemAttributeNames = []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAWSTraceHeader}
				return in
			}
			for i := 1; i <= 2; i++ {
				out, err := c.ReceiveMessage(ctx, withAttrs(&sqs.ReceiveMessageInput{QueueUrl: q, WaitTimeSeconds: 5}))
				if err != nil || len(out.Messages) != 1 {
					t.Fatalf("receive %d of poison = %+v, %v", i, out, err)
				}
				wantAttrs("a delivery of the poison", out.Messages[0])
				if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: q, ReceiptHandle: out.Messages[0].ReceiptHandle, VisibilityTimeout: 0}); err != nil {
					t.Fatal(err)
				}
			}
			if out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q, WaitTimeSeconds: 1}); err != nil || len(out.Messages) != 0 {
				t.Fatalf("a third receive of poison = %+v, %v", out, err)
			}
			dlq, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("orders-dlq")})
			if err != nil {
				t.Fatal(err)
			}
			dl, err := c.ReceiveMessage(ctx, withAttrs(&sqs.ReceiveMessageInput{QueueUrl: dlq.QueueUrl, WaitTimeSeconds: 5, VisibilityTimeout: 1}))
			if err != nil || len(dl.Messages) != 1 || *dl.Messages[0].Body != "poison" {
				t.Fatalf("dead letter = %+v, %v", dl, err)
			}
			wantAttrs("the dead letter", dl.Messages[0])
			src, err := c.ListDeadLetterSourceQueues(ctx, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: dlq.QueueUrl})
			if err != nil || len(src.QueueUrls) != 1 || src.QueueUrls[0] != *q {
				t.Fatalf("ListDeadLetterSourceQueues = %+v, %v", src, err)
			}
			if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: dlq.QueueUrl, ReceiptHandle: dl.Messages[0].ReceiptHandle, VisibilityTimeout: 0}); err != nil {
				t.Fatal(err)
			}
			dlqARN := "arn:aws:sqs:us-east-1:000000000000:orders-dlq"
			if _, err := c.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(dlqARN)}); err != nil {
				t.Fatal(err)
			}
			tasks, err := c.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(dlqARN)})
			if err != nil || len(tasks.Results) != 1 || tasks.Results[0].ApproximateNumberOfMessagesMoved != 1 || *tasks.Results[0].Status != "COMPLETED" {
				t.Fatalf("ListMessageMoveTasks = %+v, %v", tasks, err)
			}
			back, err := c.ReceiveMessage(ctx, withAttrs(&sqs.ReceiveMessageInput{QueueUrl: q, WaitTimeSeconds: 5}))
			if err != nil || len(back.Messages) != 1 || *back.Messages[0].Body != "poison" {
				t.Fatalf("redriven = %+v, %v", back, err)
			}
			wantAttrs("the redriven message", back.Messages[0])
			if _, err := c.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: q}); err != nil {
				t.Fatal(err)
			}
			if stats := s.lc(t, "queue", "stats", "orders", "--json"); !strings.Contains(stats, `"total": 0`) && !strings.Contains(stats, `"total":0`) {
				t.Fatalf("after purge: %s", stats)
			}

			// Errors the SDK maps to its exceptions.
			_, err = c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("nope")})
			var dne *types.QueueDoesNotExist
			if !errors.As(err, &dne) {
				t.Errorf("GetQueueUrl of a missing queue = %v, want QueueDoesNotExist", err)
			}
			_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String(strings.Repeat("x", 65537))})
			if apiCode(err) != "InvalidParameterValue" || !strings.Contains(err.Error(), "65537") {
				t.Errorf("a 65537-byte message = %v", err)
			}
			_, err = c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("orders.fifo")})
			if apiCode(err) != "AWS.SimpleQueueService.UnsupportedOperation" && apiCode(err) != "UnsupportedOperation" {
				t.Errorf("CreateQueue of a FIFO queue = %v (%s)", err, apiCode(err))
			}
			cq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("orders")})
			if err != nil || *cq.QueueUrl != *q {
				t.Errorf("CreateQueue of the binding = %+v, %v", cq, err)
			}
			_, err = c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: q, Entries: []types.SendMessageBatchRequestEntry{
				{Id: aws.String("x"), MessageBody: aws.String("1")}, {Id: aws.String("x"), MessageBody: aws.String("2")}}})
			var dup *types.BatchEntryIdsNotDistinct
			if !errors.As(err, &dup) {
				t.Errorf("a batch with one id twice = %v, want BatchEntryIdsNotDistinct", err)
			}
			if stats := s.lc(t, "queue", "stats", "orders", "--json"); !strings.Contains(stats, `"total": 0`) && !strings.Contains(stats, `"total":0`) {
				t.Fatalf("refused sends stored something: %s", stats)
			}
			list, err := c.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String("orders")})
			if err != nil || len(list.QueueUrls) != 2 {
				t.Errorf("ListQueues = %+v, %v", list, err)
			}
		})
	}
}

// TestGoSDKLongPollWokenByAnotherProcess: a ReceiveMessage waiting 20 s
// returns the message `localcloud queue send` (another OS process) sends
// meanwhile, on both engines.
func TestGoSDKLongPollWokenByAnotherProcess(t *testing.T) {
	for name, bindings := range engines {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := startStack(t, "", bindings)
			c := s.client()
			ctx := ctxOf(t)
			q := aws.String(s.endpoint + "/000000000000/orders")
			got := make(chan *sqs.ReceiveMessageOutput, 1)
			errc := make(chan error, 1)
			go func() {
				out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q, WaitTimeSeconds: 20})
				got <- out
				errc <- err
			}()
			s.lc(t, "queue", "send", "orders", "wake "+strconv.Itoa(1))
			out := <-got
			if err := <-errc; err != nil || len(out.Messages) != 1 || !strings.HasPrefix(*out.Messages[0].Body, "wake") {
				js, _ := json.Marshal(out)
				t.Fatalf("long poll = %s, %v", js, err)
			}
		})
	}
}

// TestSignedRequests: with sqs.accessKeyId and sqs.secretAccessKey set,
// a request signed with them passes; another secret, another key id or no
// signature at all is refused with SQS's codes, and nothing is stored.
func TestSignedRequests(t *testing.T) {
	t.Setenv("SQS_TEST_KEY", "AKIDLOCALCLOUD")
	t.Setenv("SQS_TEST_SECRET", "wJalrXUtnFEMI/K7MDENG")
	s := startStack(t, "sqs:\n  listen: 127.0.0.1:0\n  region: eu-west-1\n  accessKeyId: ${SQS_TEST_KEY}\n  secretAccessKey: ${SQS_TEST_SECRET}\n",
		"  orders:\n    type: queue\n")
	ctx := ctxOf(t)
	client := func(key, secret string) *sqs.Client {
		return sqs.New(sqs.Options{Region: "eu-west-1", BaseEndpoint: aws.String(s.endpoint),
			Credentials: credentials.NewStaticCredentialsProvider(key, secret, "")})
	}
	q := aws.String(s.endpoint + "/000000000000/orders")
	if _, err := client("AKIDLOCALCLOUD", "wJalrXUtnFEMI/K7MDENG").SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String("signed")}); err != nil {
		t.Fatalf("a request signed with the stack's keys: %v", err)
	}
	for _, tc := range []struct{ key, secret, code string }{
		{"AKIDLOCALCLOUD", "wrong", "SignatureDoesNotMatch"},
		{"AKIDOTHER", "wJalrXUtnFEMI/K7MDENG", "InvalidClientTokenId"},
	} {
		_, err := client(tc.key, tc.secret).SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String("forged")})
		if apiCode(err) != tc.code {
			t.Errorf("signed with %s/%s: %v, want %s", tc.key, tc.secret, err, tc.code)
		}
	}
	resp, err := http.Post(s.endpoint+"/", "application/x-www-form-urlencoded", strings.NewReader("Action=SendMessage&QueueUrl="+*q+"&MessageBody=unsigned"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(body), "<Code>MissingAuthenticationToken</Code>") {
		t.Errorf("unsigned: %d %s", resp.StatusCode, body)
	}
	if peek := s.lc(t, "queue", "peek", "orders"); !strings.Contains(peek, "signed") || strings.Contains(peek, "forged") || strings.Contains(peek, "unsigned") {
		t.Fatalf("peek:\n%s", peek)
	}
}
