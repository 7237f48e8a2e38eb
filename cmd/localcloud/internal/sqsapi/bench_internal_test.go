package sqsapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/localcloud/localcloud/bindings/queue"
)

// BenchmarkQuerySend and BenchmarkNativeSend: one SendMessage over HTTP
// (Query protocol, loopback) and one queue.Send on the same handle, for
// the front door's cost per request.
func BenchmarkQuerySend(b *testing.B) {
	e := newEnv(b)
	f := url.Values{"Action": {"SendMessage"}, "QueueUrl": {e.url}, "MessageBody": {strings.Repeat("x", 100)}}
	for b.Loop() {
		if st, body := e.callQuery(f); st != 200 {
			b.Fatal(body)
		}
	}
}

func BenchmarkNativeSend(b *testing.B) {
	e := newEnv(b)
	q, _ := e.sup.Queue("orders")
	p := queue.Text(strings.Repeat("x", 100))
	for b.Loop() {
		if err := q.Send(context.Background(), p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlumbingSendBatch10 and BenchmarkPlumbingReceive10: the front
// door's own work for one Query SendMessageBatch of 10 (read and decode
// the form, check the entries, build and encode the answer) and for the
// answer of a ReceiveMessage of 10, without the network and the store:
// the part of a request that is neither net/http's nor the queue's.
func BenchmarkPlumbingSendBatch10(b *testing.B) {
	f := url.Values{"Action": {"SendMessageBatch"}, "Version": {"2012-11-05"}, "QueueUrl": {"http://127.0.0.1:9324/000000000000/orders"}}
	for i := range 10 {
		p := "SendMessageBatchRequestEntry." + strconv.Itoa(i+1) + "."
		f.Set(p+"Id", "m"+strconv.Itoa(i))
		f.Set(p+"MessageBody", strings.Repeat("x", 100))
	}
	body := f.Encode()
	s := &Server{}
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		c, aerr := s.decode(r, protoQuery, "")
		if aerr != nil {
			b.Fatal(aerr.msg)
		}
		es, ids, aerr := checkBatch(c)
		if aerr != nil {
			b.Fatal(aerr.msg)
		}
		var ok []any
		for i, p := range es {
			e, aerr := checkSend(p, "Entries."+strconv.Itoa(i+1)+".")
			if aerr != nil {
				b.Fatal(aerr.msg)
			}
			ok = append(ok, obj{{"Id", ids[i]}, {"MessageId", uuid.NewString()}, {"MD5OfMessageBody", md5Hex(e.body)}})
		}
		w := httptest.NewRecorder()
		writeResult(w, protoQuery, c.op, newRequestID(), batchResult(c.op, ok, nil))
		if w.Code != http.StatusOK {
			b.Fatal(w.Body.String())
		}
	}
}

func BenchmarkPlumbingReceive10(b *testing.B) {
	out := list{item: "Message"}
	for i := range 10 {
		body := strings.Repeat("x", 100)
		out.items = append(out.items, obj{{"MessageId", uuid.NewString()}, {"ReceiptHandle", strings.Repeat("r", 60) + strconv.Itoa(i)},
			{"MD5OfBody", md5Hex(body)}, {"Body", body}})
	}
	for b.Loop() {
		for _, pr := range []proto{protoQuery, protoJSON} {
			w := httptest.NewRecorder()
			writeResult(w, pr, "ReceiveMessage", newRequestID(), obj{{"Messages", out}})
			if w.Code != http.StatusOK {
				b.Fatal(w.Body.String())
			}
		}
	}
}
