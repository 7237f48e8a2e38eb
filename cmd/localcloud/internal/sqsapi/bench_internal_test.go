package sqsapi

import (
	"context"
	"net/url"
	"strings"
	"testing"

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
