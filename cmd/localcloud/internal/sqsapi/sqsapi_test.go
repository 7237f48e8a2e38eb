package sqsapi

import (
	"encoding/json"
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/supervisor"
)

const testStack = `version: 1
name: shop
notify:
  listen: 127.0.0.1:0
explorer: off
bindings:
  orders:
    type: queue
    visibilityTimeout: 30s
    maxAttempts: 2
    deadLetter: orders-dlq
  orders-dlq:
    type: queue
  carts:
    type: kv
`

type env struct {
	t   testing.TB
	sup *supervisor.Supervisor
	ts  *httptest.Server
	url string // queue URL of orders
}

func newEnv(t testing.TB) *env {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "stack.yaml")
	if err := os.WriteFile(file, []byte(testStack), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	sup, err := supervisor.Start(t.Context(), st, supervisor.Options{HealthInterval: -1, NoWatch: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sup.Close() })
	nc, err := sup.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ts := httptest.NewUnstartedServer(nil)
	srv, err := New(Options{Source: sup, Endpoint: "http://" + ts.Listener.Addr().String(), Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = srv
	ts.Start()
	t.Cleanup(func() { _ = srv.Close(t.Context()); ts.Close() })
	return &env{t: t, sup: sup, ts: ts, url: ts.URL + "/000000000000/orders"}
}

// callJSON sends one JSON-protocol request; it returns the status, the
// decoded body and the x-amzn-query-error header.
func (e *env) callJSON(op string, in any) (int, map[string]any, string) {
	e.t.Helper()
	body, _ := json.Marshal(in)
	req, _ := http.NewRequest(http.MethodPost, e.ts.URL+"/", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", jsonType)
	req.Header.Set("X-Amz-Target", targetPfx+op)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil {
		e.t.Fatalf("%s: answer is not JSON: %v: %s", op, err, b)
	}
	return resp.StatusCode, out, resp.Header.Get(queryErrHdr)
}

// callQuery sends one Query-protocol request and returns the status and
// the XML body.
func (e *env) callQuery(form url.Values) (int, string) {
	e.t.Helper()
	resp, err := http.PostForm(e.ts.URL+"/", form)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (e *env) mustJSON(op string, in any) map[string]any {
	e.t.Helper()
	st, out, qe := e.callJSON(op, in)
	if st != 200 {
		e.t.Fatalf("%s: status %d (%s): %v", op, st, qe, out)
	}
	return out
}

func TestJSONProtocolRoundTrip(t *testing.T) {
	e := newEnv(t)
	out := e.mustJSON("GetQueueUrl", map[string]any{"QueueName": "orders"})
	if out["QueueUrl"] != e.url {
		t.Fatalf("QueueUrl = %v, want %s", out["QueueUrl"], e.url)
	}
	out = e.mustJSON("SendMessage", map[string]any{"QueueUrl": e.url, "MessageBody": "hello"})
	sent := out
	if out["MD5OfMessageBody"] != "5d41402abc4b2a76b9719d911017c592" {
		t.Errorf("MD5OfMessageBody = %v", out["MD5OfMessageBody"])
	}
	// The message is in the binding's store: the public API sees it.
	q, _ := e.sup.Queue("orders")
	peek, err := q.Peek(t.Context(), 10)
	if err != nil || len(peek) != 1 || peek[0].Payload.Data != "hello" || peek[0].Payload.Type != queue.TypeText {
		t.Fatalf("peek = %+v, %v", peek, err)
	}
	out = e.mustJSON("ReceiveMessage", map[string]any{"QueueUrl": e.url, "MaxNumberOfMessages": 10,
		"AttributeNames": []string{"All"}, "VisibilityTimeout": 60})
	msgs, _ := out["Messages"].([]any)
	if len(msgs) != 1 {
		t.Fatalf("messages = %v", out)
	}
	m := msgs[0].(map[string]any)
	attrs := m["Attributes"].(map[string]any)
	if m["Body"] != "hello" || m["MD5OfBody"] != "5d41402abc4b2a76b9719d911017c592" || attrs["ApproximateReceiveCount"] != "1" || attrs["SentTimestamp"] == nil {
		t.Fatalf("message = %v", m)
	}
	if m["MessageId"] != sent["MessageId"] {
		t.Fatalf("received MessageId %v; SendMessage answered %v", m["MessageId"], sent["MessageId"])
	}
	receipt := m["ReceiptHandle"].(string)
	// Visible again at once, then received again: the first receipt is stale.
	e.mustJSON("ChangeMessageVisibility", map[string]any{"QueueUrl": e.url, "ReceiptHandle": receipt, "VisibilityTimeout": 0})
	out = e.mustJSON("ReceiveMessage", map[string]any{"QueueUrl": e.url, "AttributeNames": []string{"ApproximateReceiveCount"}})
	m2 := out["Messages"].([]any)[0].(map[string]any)
	if m2["MessageId"] != m["MessageId"] || m2["Attributes"].(map[string]any)["ApproximateReceiveCount"] != "2" {
		t.Fatalf("second delivery = %v (first %v)", m2, m)
	}
	st, body, qe := e.callJSON("DeleteMessage", map[string]any{"QueueUrl": e.url, "ReceiptHandle": receipt})
	if st != 400 || qe != "InvalidParameterValue;Sender" || !strings.Contains(body["message"].(string), "expired") {
		t.Fatalf("stale delete: %d %s %v", st, qe, body)
	}
	if n, _ := q.Stats(t.Context()); n.Total != 1 {
		t.Fatalf("a stale delete deleted: %+v", n)
	}
	// A batch: the stale receipt, a garbage one, then the current one.
	out = e.mustJSON("DeleteMessageBatch", map[string]any{"QueueUrl": e.url, "Entries": []any{
		map[string]any{"Id": "old", "ReceiptHandle": receipt},
		map[string]any{"Id": "junk", "ReceiptHandle": "garbage"},
	}})
	failed := map[string]string{}
	for _, f := range out["Failed"].([]any) {
		fm := f.(map[string]any)
		failed[fm["Id"].(string)] = fm["Code"].(string)
	}
	if len(ids(out["Successful"])) != 0 || failed["old"] != "InvalidParameterValue" || failed["junk"] != "ReceiptHandleIsInvalid" {
		t.Fatalf("batch delete = %v", out)
	}
	if n, _ := q.Stats(t.Context()); n.Total != 1 {
		t.Fatalf("a stale batch delete deleted: %+v", n)
	}
	out = e.mustJSON("DeleteMessageBatch", map[string]any{"QueueUrl": e.url, "Entries": []any{
		map[string]any{"Id": "cur", "ReceiptHandle": m2["ReceiptHandle"]},
	}})
	if okIDs := ids(out["Successful"]); len(okIDs) != 1 || okIDs[0] != "cur" || len(out["Failed"].([]any)) != 0 {
		t.Fatalf("batch delete = %v", out)
	}
	if n, _ := q.Stats(t.Context()); n.Total != 0 {
		t.Fatalf("after delete: %+v", n)
	}
}

func ids(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, e := range l {
		out = append(out, e.(map[string]any)["Id"].(string))
	}
	return out
}

func TestJSONErrors(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		op      string
		in      map[string]any
		status  int
		jsonT   string
		query   string
		mention string
	}{
		{"GetQueueUrl", map[string]any{"QueueName": "nope"}, 400, "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", "nope"},
		{"GetQueueUrl", map[string]any{"QueueName": "carts"}, 400, "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", "carts"},
		{"SendMessage", map[string]any{"QueueUrl": e.url}, 400, "MissingParameter", "MissingParameter", "MessageBody"},
		{"SendMessage", map[string]any{"QueueUrl": e.url, "MessageBody": strings.Repeat("x", 65537)}, 400, "InvalidParameterValue", "InvalidParameterValue", "65537"},
		{"SendMessage", map[string]any{"QueueUrl": e.url, "MessageBody": "a\x01b"}, 400, "InvalidMessageContents", "InvalidMessageContents", "U+0001"},
		{"SendMessage", map[string]any{"QueueUrl": e.url, "MessageBody": "x", "DelaySeconds": 901}, 400, "InvalidParameterValue", "InvalidParameterValue", "DelaySeconds"},
		{"ReceiveMessage", map[string]any{"QueueUrl": e.url, "MaxNumberOfMessages": 11}, 400, "InvalidParameterValue", "InvalidParameterValue", "MaxNumberOfMessages"},
		{"ReceiveMessage", map[string]any{"QueueUrl": e.url, "WaitTimeSeconds": 21}, 400, "InvalidParameterValue", "InvalidParameterValue", "WaitTimeSeconds"},
		{"SendMessageBatch", map[string]any{"QueueUrl": e.url, "Entries": []any{}}, 400, "EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", "Entries"},
		{"SendMessageBatch", map[string]any{"QueueUrl": e.url, "Entries": []any{map[string]any{"Id": "a", "MessageBody": "x"}, map[string]any{"Id": "a", "MessageBody": "y"}}}, 400, "BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", "a"},
		{"SendMessageBatch", map[string]any{"QueueUrl": e.url, "Entries": elevenEntries()}, 400, "TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", "11"},
		{"DeleteMessage", map[string]any{"QueueUrl": e.url, "ReceiptHandle": "nonsense"}, 404, "ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", "nonsense"},
		{"CreateQueue", map[string]any{"QueueName": "jobs.fifo"}, 400, "UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", "FIFO"},
		{"CreateQueue", map[string]any{"QueueName": "orders", "Attributes": map[string]string{"VisibilityTimeout": "60"}}, 400, "QueueNameExists", "QueueAlreadyExists", "VisibilityTimeout"},
		{"AddPermission", map[string]any{"QueueUrl": e.url}, 400, "UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", "AddPermission"},
		{"Frobnicate", map[string]any{}, 400, "InvalidAction", "InvalidAction", "Frobnicate"},
	}
	for _, c := range cases {
		st, out, qe := e.callJSON(c.op, c.in)
		msg, _ := out["message"].(string)
		if st != c.status || out["__type"] != errTypePfx+c.jsonT || qe != c.query+";Sender" || !strings.Contains(msg, c.mention) {
			t.Errorf("%s %v: got %d %v %q; want %d %s %s mentioning %q", c.op, c.in["QueueName"], st, out, qe, c.status, c.jsonT, c.query, c.mention)
		}
	}
	q, _ := e.sup.Queue("orders")
	if n, _ := q.Stats(t.Context()); n.Total != 0 {
		t.Fatalf("a refused send stored something: %+v", n)
	}
	out := e.mustJSON("CreateQueue", map[string]any{"QueueName": "orders", "Attributes": map[string]string{"VisibilityTimeout": "30"}})
	if out["QueueUrl"] != e.url {
		t.Fatalf("CreateQueue of the binding = %v", out)
	}
}

func elevenEntries() []any {
	var es []any
	for i := range 11 {
		es = append(es, map[string]any{"Id": "e" + string(rune('a'+i)), "MessageBody": "x"})
	}
	return es
}

// queryMessage is one Message of a Query ReceiveMessage answer.
type queryMessage struct {
	MessageID     string `xml:"MessageId"`
	ReceiptHandle string
	MD5OfBody     string
	Body          string
	Attribute     []struct{ Name, Value string }
}

func TestQueryProtocol(t *testing.T) {
	e := newEnv(t)
	st, body := e.callQuery(url.Values{"Action": {"SendMessageBatch"}, "QueueUrl": {e.url},
		"SendMessageBatchRequestEntry.1.Id": {"a"}, "SendMessageBatchRequestEntry.1.MessageBody": {"one <&>"},
		"SendMessageBatchRequestEntry.2.Id": {"b"}, "SendMessageBatchRequestEntry.2.MessageBody": {"two"}})
	if st != 200 || strings.Count(body, "<SendMessageBatchResultEntry>") != 2 || !strings.Contains(body, xmlNS) {
		t.Fatalf("SendMessageBatch: %d %s", st, body)
	}
	st, body = e.callQuery(url.Values{"Action": {"ReceiveMessage"}, "QueueUrl": {e.url}, "MaxNumberOfMessages": {"10"},
		"AttributeName.1": {"All"}, "WaitTimeSeconds": {"1"}})
	var rr struct {
		Result struct {
			Message []queryMessage
		} `xml:"ReceiveMessageResult"`
	}
	if err := xml.Unmarshal([]byte(body), &rr); st != 200 || err != nil || len(rr.Result.Message) != 2 {
		t.Fatalf("ReceiveMessage: %d %v %s", st, err, body)
	}
	m := rr.Result.Message[0]
	if m.Body != "one <&>" || m.MD5OfBody != md5Hex("one <&>") || len(m.Attribute) != 3 {
		t.Fatalf("message = %+v", m)
	}
	st, body = e.callQuery(url.Values{"Action": {"GetQueueAttributes"}, "QueueUrl": {e.url}, "AttributeName.1": {"All"}})
	if st != 200 || !strings.Contains(body, "<Name>ApproximateNumberOfMessagesNotVisible</Name><Value>2</Value>") ||
		!strings.Contains(body, "<Name>RedrivePolicy</Name>") || !strings.Contains(body, "<Name>MaximumMessageSize</Name><Value>65536</Value>") {
		t.Fatalf("GetQueueAttributes: %d %s", st, body)
	}
	st, body = e.callQuery(url.Values{"Action": {"DeleteMessage"}, "QueueUrl": {e.url}, "ReceiptHandle": {"junk"}})
	if st != 404 || !strings.Contains(body, "<Code>ReceiptHandleIsInvalid</Code>") || !strings.Contains(body, "<Type>Sender</Type>") {
		t.Fatalf("DeleteMessage junk: %d %s", st, body)
	}
	st, body = e.callQuery(url.Values{"Action": {"GetQueueUrl"}, "QueueName": {"missing"}})
	if st != 400 || !strings.Contains(body, "<Code>AWS.SimpleQueueService.NonExistentQueue</Code>") {
		t.Fatalf("GetQueueUrl missing: %d %s", st, body)
	}
	st, body = e.callQuery(url.Values{"Action": {"ListQueues"}})
	if st != 200 || strings.Count(body, "<QueueUrl>") != 2 {
		t.Fatalf("ListQueues: %d %s", st, body)
	}
	st, body = e.callQuery(url.Values{"Action": {"PurgeQueue"}, "QueueUrl": {e.url}})
	if st != 200 || !strings.Contains(body, "<PurgeQueueResponse") {
		t.Fatalf("PurgeQueue: %d %s", st, body)
	}
}

// TestLongPollWakesOnSend: a ReceiveMessage waiting up to 20 s returns the
// message sent meanwhile through the public API.
func TestLongPollWakesOnSend(t *testing.T) {
	e := newEnv(t)
	done := make(chan map[string]any, 1)
	go func() {
		_, out, _ := e.callJSON("ReceiveMessage", map[string]any{"QueueUrl": e.url, "WaitTimeSeconds": 20})
		done <- out
	}()
	q, _ := e.sup.Queue("orders")
	time.Sleep(50 * time.Millisecond) // most likely waiting by now; if not, the receive finds it at once
	if err := q.Send(t.Context(), queue.Text("wake")); err != nil {
		t.Fatal(err)
	}
	out := <-done
	msgs, _ := out["Messages"].([]any)
	if len(msgs) != 1 || msgs[0].(map[string]any)["Body"] != "wake" {
		t.Fatalf("long poll = %v", out)
	}
}

// BenchmarkQuerySendReceiveDelete: over HTTP on loopback, a Query
// SendMessageBatch of 10, a ReceiveMessage of 10 and a DeleteMessageBatch
// of them, per op (for profiles of the front door; BenchmarkSQS in
// e2e/sqssdk compares with goaws).
func BenchmarkQuerySendReceiveDelete(b *testing.B) {
	e := newEnv(b)
	send := url.Values{"Action": {"SendMessageBatch"}, "QueueUrl": {e.url}}
	for i := range 10 {
		p := "SendMessageBatchRequestEntry." + strconv.Itoa(i+1) + "."
		send.Set(p+"Id", "m"+strconv.Itoa(i))
		send.Set(p+"MessageBody", strings.Repeat("x", 100))
	}
	recv := url.Values{"Action": {"ReceiveMessage"}, "QueueUrl": {e.url}, "MaxNumberOfMessages": {"10"}}
	re := regexp.MustCompile(`<ReceiptHandle>([^<]*)</ReceiptHandle>`)
	for b.Loop() {
		if st, body := e.callQuery(send); st != 200 {
			b.Fatal(body)
		}
		st, body := e.callQuery(recv)
		if st != 200 {
			b.Fatal(body)
		}
		del := url.Values{"Action": {"DeleteMessageBatch"}, "QueueUrl": {e.url}}
		for i, m := range re.FindAllStringSubmatch(body, -1) {
			p := "DeleteMessageBatchRequestEntry." + strconv.Itoa(i+1) + "."
			del.Set(p+"Id", "d"+strconv.Itoa(i))
			del.Set(p+"ReceiptHandle", m[1])
		}
		if st, body := e.callQuery(del); st != 200 {
			b.Fatal(body)
		}
	}
}
