package sqsapi

import (
	"encoding/base64"
	"encoding/xml"
	"net/url"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/bindings/queue"
)

// TestMD5OfAttrs: the digests of the aws-md5-of-message-attributes
// package's examples (npm), which SDKs compute the same way.
func TestMD5OfAttrs(t *testing.T) {
	a1 := queue.Attribute{Type: "String", String: "attribValue 1"}
	num := queue.Attribute{Type: "Number.float", String: "4563442423554324324264524243.32543234"}
	bin := queue.Attribute{Type: "Binary", Binary: []byte("Hello binary world!")}
	for _, c := range []struct {
		a    queue.Attributes
		want string
	}{
		{queue.Attributes{"attribName1": a1}, "19e27d4e946b072f3f58da80d94fd778"},
		{queue.Attributes{"customNumberTypeAttrib": num}, "9fe1b90bbd9965bdf77bac517c7d2495"},
		{queue.Attributes{"binaryAttribute": bin}, "31a92b15d92f8db860eda32aceb656c3"},
		{queue.Attributes{"attribName1": a1, "customNumberTypeAttrib": num, "binaryAttribute": bin}, "c932db14a896c663f83c260297d594ff"},
	} {
		if got := md5OfAttrs(c.a); got != c.want {
			t.Errorf("md5OfAttrs(%v) = %s, want %s", c.a, got, c.want)
		}
	}
}

// TestAttributesJSON: message and system attributes through SendMessage,
// ReceiveMessage's name filters and the public API; bad ones store
// nothing.
func TestAttributesJSON(t *testing.T) {
	e := newEnv(t)
	u := strings.TrimSuffix(e.url, "orders") + "orders-dlq" // no maxAttempts: received many times
	attrs := map[string]any{
		"attribName1":            map[string]any{"DataType": "String", "StringValue": "attribValue 1"},
		"customNumberTypeAttrib": map[string]any{"DataType": "Number.float", "StringValue": "4563442423554324324264524243.32543234"},
		"binaryAttribute":        map[string]any{"DataType": "Binary", "BinaryValue": base64.StdEncoding.EncodeToString([]byte("Hello binary world!"))},
	}
	sys := map[string]any{"AWSTraceHeader": map[string]any{"DataType": "String", "StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793"}}
	out := e.mustJSON("SendMessage", map[string]any{"QueueUrl": u, "MessageBody": "hello", "MessageAttributes": attrs, "MessageSystemAttributes": sys})
	if out["MD5OfMessageAttributes"] != "c932db14a896c663f83c260297d594ff" || out["MD5OfMessageSystemAttributes"] == nil {
		t.Fatalf("SendMessage = %v", out)
	}
	q, _ := e.sup.Queue("orders-dlq")
	peek, err := q.Peek(t.Context(), 10)
	if err != nil || len(peek) != 1 || len(peek[0].Attributes) != 4 || peek[0].Attributes["AWS.AWSTraceHeader"].String == "" {
		t.Fatalf("peek = %+v, %v", peek, err)
	}
	for _, c := range []struct {
		names []string
		n     int
		md5   string
	}{
		{[]string{"All"}, 3, "c932db14a896c663f83c260297d594ff"},
		{[]string{".*"}, 3, "c932db14a896c663f83c260297d594ff"},
		{[]string{"attrib.*"}, 0, ""}, // a prefix ends with a period
		{[]string{"attribName1"}, 1, "19e27d4e946b072f3f58da80d94fd778"},
		{[]string{"binaryAttribute", "nope"}, 1, "31a92b15d92f8db860eda32aceb656c3"},
		{nil, 0, ""},
	} {
		out = e.mustJSON("ReceiveMessage", map[string]any{"QueueUrl": u, "MessageAttributeNames": c.names, "VisibilityTimeout": 60,
			"MessageSystemAttributeNames": []string{"AWSTraceHeader"}, "WaitTimeSeconds": 5})
		ms, _ := out["Messages"].([]any)
		if len(ms) != 1 {
			t.Fatalf("receive with %v: %v", c.names, out)
		}
		m := ms[0].(map[string]any)
		e.mustJSON("ChangeMessageVisibility", map[string]any{"QueueUrl": u, "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0})
		got, _ := m["MessageAttributes"].(map[string]any)
		if len(got) != c.n || (c.md5 != "" && m["MD5OfMessageAttributes"] != c.md5) || (c.md5 == "" && m["MD5OfMessageAttributes"] != nil) {
			t.Errorf("receive with %v: %v", c.names, m)
		}
		if a := m["Attributes"].(map[string]any); a["AWSTraceHeader"] != "Root=1-5759e988-bd862e3fe1be46a994272793" {
			t.Errorf("receive with %v: system attributes %v", c.names, a)
		}
		if c.n == 3 {
			b := got["binaryAttribute"].(map[string]any)
			if b["DataType"] != "Binary" || b["BinaryValue"] != base64.StdEncoding.EncodeToString([]byte("Hello binary world!")) {
				t.Errorf("binary attribute %v", b)
			}
		}
	}
	eleven := map[string]any{}
	for _, n := range strings.Split("a b c d e f g h i j k", " ") {
		eleven[n] = map[string]any{"DataType": "String", "StringValue": "v"}
	}
	big := strings.Repeat("x", queue.MaxPayloadBytes-10)
	for _, c := range []struct {
		attrs map[string]any
		body  string
		want  []string
	}{
		{map[string]any{"AWS.x": map[string]any{"DataType": "String", "StringValue": "v"}}, "b", []string{"MessageAttributes", `"AWS.x"`, "AWS."}},
		{map[string]any{"a..b": map[string]any{"DataType": "String", "StringValue": "v"}}, "b", []string{`"a..b"`}},
		{map[string]any{"n": map[string]any{"DataType": "Number", "StringValue": "12x"}}, "b", []string{`"n"`, "Number", `"12x"`}},
		{map[string]any{"n": map[string]any{"DataType": "Float", "StringValue": "1"}}, "b", []string{`"n"`, "DataType", `"Float"`}},
		{map[string]any{"n": map[string]any{"DataType": "String"}}, "b", []string{`"n"`, "non-empty StringValue"}},
		{map[string]any{"n": map[string]any{"DataType": "Binary", "BinaryValue": "!!"}}, "b", []string{`"n"`, "base64"}},
		{eleven, "b", []string{"[11]", "[10]"}},
		{map[string]any{"k": map[string]any{"DataType": "String", "StringValue": "0123456789"}}, big, []string{"65537", "65543", "attributes 17"}},
	} {
		st, body, qe := e.callJSON("SendMessage", map[string]any{"QueueUrl": u, "MessageBody": c.body, "MessageAttributes": c.attrs})
		msg, _ := body["message"].(string)
		if st != 400 || qe != "InvalidParameterValue;Sender" {
			t.Errorf("send with %v: %d %s %v", c.attrs, st, qe, body)
		}
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("send with %v: %q lacks %q", c.attrs, msg, w)
			}
		}
	}
	if peek, _ := q.Peek(t.Context(), 10); len(peek) != 1 {
		t.Fatalf("refused sends stored %d messages", len(peek)-1)
	}
}

// TestAttributesQuery: the Query protocol's MessageAttribute.N forms, on
// a batch send and a receive.
func TestAttributesQuery(t *testing.T) {
	e := newEnv(t)
	st, body := e.callQuery(url.Values{"Action": {"SendMessageBatch"}, "QueueUrl": {e.url},
		"SendMessageBatchRequestEntry.1.Id": {"a"}, "SendMessageBatchRequestEntry.1.MessageBody": {"one"},
		"SendMessageBatchRequestEntry.1.MessageAttribute.1.Name":              {"attribName1"},
		"SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType":    {"String"},
		"SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue": {"attribValue 1"},
		"SendMessageBatchRequestEntry.2.Id":                                   {"b"}, "SendMessageBatchRequestEntry.2.MessageBody": {"two"}})
	if st != 200 || strings.Count(body, "<MD5OfMessageAttributes>19e27d4e946b072f3f58da80d94fd778</MD5OfMessageAttributes>") != 1 {
		t.Fatalf("SendMessageBatch: %d %s", st, body)
	}
	st, body = e.callQuery(url.Values{"Action": {"ReceiveMessage"}, "QueueUrl": {e.url}, "MaxNumberOfMessages": {"10"},
		"MessageAttributeName.1": {"All"}, "WaitTimeSeconds": {"1"}})
	var rr struct {
		Result struct {
			Message []struct {
				Body                   string
				MD5OfMessageAttributes string
				MessageAttribute       []struct {
					Name  string
					Value struct{ StringValue, DataType string }
				}
			}
		} `xml:"ReceiveMessageResult"`
	}
	if err := xml.Unmarshal([]byte(body), &rr); st != 200 || err != nil || len(rr.Result.Message) != 2 {
		t.Fatalf("ReceiveMessage: %d %v %s", st, err, body)
	}
	m := rr.Result.Message[0]
	if m.Body != "one" || m.MD5OfMessageAttributes != "19e27d4e946b072f3f58da80d94fd778" || len(m.MessageAttribute) != 1 ||
		m.MessageAttribute[0].Name != "attribName1" || m.MessageAttribute[0].Value.StringValue != "attribValue 1" || m.MessageAttribute[0].Value.DataType != "String" {
		t.Fatalf("message = %+v\n%s", m, body)
	}
	if two := rr.Result.Message[1]; two.MD5OfMessageAttributes != "" || len(two.MessageAttribute) != 0 {
		t.Fatalf("a message without attributes shows %+v", two)
	}
}
