package explorer

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/supervisor"
)

// testStack has 2 KV stores and 3 queues, one the dead-letter queue of
// another.
const testStack = `version: 1
name: shop
notify:
  listen: 127.0.0.1:0
bindings:
  carts:
    type: kv
  sessions:
    type: kv
  orders:
    type: queue
    maxAttempts: 1
    deadLetter: orders-dlq
  orders-dlq:
    type: queue
  jobs:
    type: queue
`

// env is one explorer on a real supervisor (real stores, real NATS).
type env struct {
	t    *testing.T
	sup  *supervisor.Supervisor
	srv  *Server
	ts   *httptest.Server
	host string // 127.0.0.1:port
}

// kv returns the handle of the KV binding called name, held until the
// test ends.
func (e *env) kv(name string) *kv.Store {
	e.t.Helper()
	k, release, err := e.sup.KV(e.t.Context(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(release)
	return k
}

func newEnv(t *testing.T, mod func(*Options)) *env {
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
	// No idle store is kept open: every read of the explorer opens its
	// KV store again, as it does in a stack of thousands.
	sup, err := supervisor.Start(t.Context(), st, supervisor.Options{HealthInterval: -1, NoWatch: true, MaxIdleStores: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sup.Close() })
	nc, err := sup.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ts := httptest.NewUnstartedServer(nil)
	opts := Options{Source: sup, Conn: nc, PollInterval: 50 * time.Millisecond,
		AsyncAPI: func() ([]byte, error) { return []byte(`{"asyncapi":"3.0.0"}`), nil },
		Env: func() ([]EnvVar, error) {
			return []EnvVar{{Name: "LOCALCLOUD_STACK_NAME", Value: "shop"}, {Name: "LOCALCLOUD_NATS_TOKEN", Value: "hunter2", Secret: true}}, nil
		}}
	if mod != nil {
		mod(&opts)
	}
	srv, err := New(ts.Listener.Addr().String(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = srv.Handler()
	ts.Start()
	t.Cleanup(func() {
		ts.CloseClientConnections()
		_ = srv.Close(t.Context())
		ts.Close()
	})
	return &env{t: t, sup: sup, srv: srv, ts: ts, host: ts.Listener.Addr().String()}
}

// do sends a request; for a POST, from the explorer's own origin with the
// CSRF token unless the headers say otherwise.
func (e *env) do(method, path, body string, hdr map[string]string) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.ts.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", e.ts.URL)
		req.Header.Set(CSRFHeader, e.srv.csrf)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func (e *env) want(method, path, body string, status int) string {
	e.t.Helper()
	res, b := e.do(method, path, body, nil)
	if res.StatusCode != status {
		e.t.Fatalf("%s %s: status %d, want %d: %s", method, path, res.StatusCode, status, b)
	}
	return b
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}

func (e *env) queue(name string) *queue.Queue {
	q, ok := e.sup.Queue(name)
	if !ok {
		e.t.Fatalf("no queue %s", name)
	}
	return q
}

func (e *env) stats(name string) queue.Stats {
	e.t.Helper()
	st, err := e.queue(name).Stats(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

func TestWrongHostIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	_, port, _ := strings.Cut(e.host, ":")
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1:1", "localhost.evil.example:" + port} {
		for _, path := range []string{"/", "/api/bindings", "/api/events"} {
			res, body := e.do(http.MethodGet, path, "", map[string]string{"Host": host})
			if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "host:") {
				t.Errorf("Host %s GET %s: %d %q, want 403 naming the host", host, path, res.StatusCode, body)
			}
		}
	}
	for _, host := range []string{e.host, "localhost:" + port, "LOCALHOST:" + port} {
		if res, body := e.do(http.MethodGet, "/", "", map[string]string{"Host": host}); res.StatusCode != http.StatusOK {
			t.Errorf("Host %s: %d %s", host, res.StatusCode, body)
		}
	}
	// A POST through a foreign host changes nothing.
	res, _ := e.do(http.MethodPost, "/api/queues/jobs/send", `{"data":"x"}`, map[string]string{"Host": "evil.example:" + port})
	if res.StatusCode != http.StatusForbidden || e.stats("jobs").Total != 0 {
		t.Errorf("foreign host send: %d, total %d", res.StatusCode, e.stats("jobs").Total)
	}
}

func TestMutationsNeedCSRFAndSameOrigin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	cases := map[string]map[string]string{
		"no token":         {CSRFHeader: ""},
		"wrong token":      {CSRFHeader: "0123"},
		"other origin":     {"Origin": "http://evil.example"},
		"null origin":      {"Origin": "null"},
		"https origin":     {"Origin": "https://" + e.host},
		"cross-site fetch": {"Origin": "", "Sec-Fetch-Site": "cross-site"},
	}
	for name, hdr := range cases {
		res, body := e.do(http.MethodPost, "/api/queues/jobs/send", `{"data":"x"}`, hdr)
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403: %s", name, res.StatusCode, body)
		}
		if e := decode[apiError](t, body); !strings.HasPrefix(e.Error, "csrf:") && !strings.HasPrefix(e.Error, "origin:") {
			t.Errorf("%s: error %q names neither csrf nor origin", name, e.Error)
		}
	}
	if n := e.stats("jobs").Total; n != 0 {
		t.Fatalf("refused sends stored %d messages", n)
	}
	// A script without Origin but with the token is fine.
	if res, body := e.do(http.MethodPost, "/api/queues/jobs/send", `{"data":"x"}`, map[string]string{"Origin": ""}); res.StatusCode != http.StatusOK {
		t.Fatalf("script send: %d %s", res.StatusCode, body)
	}
	// GET /api/session gives the token to same-origin readers.
	s := decode[map[string]any](t, e.want(http.MethodGet, "/api/session", "", 200))
	if s["csrfToken"] != e.srv.csrf || s["stack"] != "shop" {
		t.Errorf("session = %v", s)
	}
	// Changes are POSTs: other methods are refused.
	for _, m := range []string{http.MethodPut, http.MethodDelete, http.MethodPatch} {
		if res, _ := e.do(m, "/api/queues/jobs/purge", `{"confirm":"jobs"}`, nil); res.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s: status %d, want 405", m, res.StatusCode)
		}
	}
	// A GET cannot change anything.
	if res, _ := e.do(http.MethodGet, "/api/queues/jobs/purge", "", nil); res.StatusCode == http.StatusOK {
		t.Errorf("GET purge: 200")
	}
	if n := e.stats("jobs").Total; n != 1 {
		t.Fatalf("total %d, want 1", n)
	}
}

func TestReadOnlyRefusesEveryChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *Options) { o.ReadOnly = true })
	if err := e.queue("jobs").Send(t.Context(), queue.Text("keep")); err != nil {
		t.Fatal(err)
	}
	posts := map[string]string{
		"/api/queues/jobs/send":          `{"data":"x"}`,
		"/api/queues/jobs/purge":         `{"confirm":"jobs"}`,
		"/api/queues/orders-dlq/redrive": `{}`,
		"/api/kv/carts/put":              `{"key":"k","value":"v"}`,
		"/api/kv/carts/delete":           `{"key":"k"}`,
	}
	for path, body := range posts {
		res, b := e.do(http.MethodPost, path, body, nil)
		if res.StatusCode != http.StatusForbidden || !strings.Contains(b, "readOnly") {
			t.Errorf("POST %s: %d %s, want 403 naming readOnly", path, res.StatusCode, b)
		}
	}
	if st := e.stats("jobs"); st.Total != 1 {
		t.Errorf("jobs total %d after refused changes, want 1", st.Total)
	}
	k := e.kv("carts")
	if _, ok, _ := k.Lookup(t.Context(), "k"); ok {
		t.Error("a refused put stored a key")
	}
	// Reading still works, and the pages hide the forms.
	e.want(http.MethodGet, "/api/queues/jobs/messages", "", 200)
	page := e.want(http.MethodGet, "/queues/jobs", "", 200)
	if strings.Contains(page, `id="send-form"`) || !strings.Contains(page, "read-only") {
		t.Error("read-only queue page shows the send form or no read-only badge")
	}
}

func TestPayloadsAreEscaped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const xss = `<script>alert("x")</script><img src=x onerror=alert(1)>`
	e.want(http.MethodPost, "/api/queues/jobs/send", mustJSON(t, sendRequest{Data: xss}), 200)
	e.want(http.MethodPost, "/api/queues/jobs/send", mustJSON(t, sendRequest{Type: "json", Data: mustJSON(t, map[string]string{"html": xss})}), 200)
	e.want(http.MethodPost, "/api/kv/carts/put", mustJSON(t, putRequest{Key: "evil", Value: xss}), 200)
	for _, path := range []string{"/queues/jobs", "/kv/carts?key=evil", "/kv/carts?prefix=ev"} {
		page := e.want(http.MethodGet, path, "", 200)
		if strings.Contains(page, "<script>alert") || strings.Contains(page, "<img src=x") {
			t.Errorf("%s: the payload is in the page unescaped", path)
		}
		if path != "/kv/carts?prefix=ev" && !strings.Contains(page, "&lt;script&gt;alert(") {
			t.Errorf("%s: the escaped payload is not shown", path)
		}
	}
	// A prefix or key in the URL is escaped too.
	page := e.want(http.MethodGet, "/kv/carts?prefix=%3Cscript%3E", "", 200)
	if strings.Contains(page, "<script>") && strings.Count(page, "<script") != 1 {
		t.Error("a prefix in the URL reached the page unescaped")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestBindingsAndStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	q := e.queue("orders")
	for range 2 {
		if err := q.Send(t.Context(), queue.Text("a")); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Send(t.Context(), queue.Text("later"), queue.WithDelay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Receive(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	k := e.kv("carts")
	if _, err := k.Put(t.Context(), "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	got := decode[struct{ Bindings []bindingJSON }](t, e.want(http.MethodGet, "/api/bindings", "", 200))
	if len(got.Bindings) != 5 {
		t.Fatalf("%d bindings, want 5", len(got.Bindings))
	}
	by := map[string]bindingJSON{}
	for _, b := range got.Bindings {
		by[b.Name] = b
	}
	o := by["orders"]
	if o.Queue == nil || o.Queue.Due != 1 || o.Queue.InFlight != 1 || o.Queue.Delayed != 1 || o.Queue.Total != 3 || o.Queue.Oldest == 0 {
		t.Errorf("orders = %+v %+v", o, o.Queue)
	}
	if o.Engine != "file (localqueue.v1)" || o.Health != "ok" || o.DeadLetter != "orders-dlq" || o.MaxAttempts != 1 {
		t.Errorf("orders = %+v", o)
	}
	if d := by["orders-dlq"]; len(d.DeadLetterFor) != 1 || d.DeadLetterFor[0] != "orders" {
		t.Errorf("orders-dlq DeadLetterFor = %v", d.DeadLetterFor)
	}
	if c := by["carts"]; c.KV == nil || c.KV.Live != 1 || c.Engine != "file (localkv.v1)" {
		t.Errorf("carts = %+v", c)
	}
	one := decode[bindingJSON](t, e.want(http.MethodGet, "/api/bindings/carts", "", 200))
	if one.Name != "carts" || one.KV == nil {
		t.Errorf("one = %+v", one)
	}
	if b := e.want(http.MethodGet, "/api/bindings/nope", "", 404); !strings.Contains(b, `binding: no binding \"nope\"`) {
		t.Errorf("unknown binding: %s", b)
	}
	e.want(http.MethodGet, "/api/nothing", "", 404)
	page := e.want(http.MethodGet, "/", "", 200)
	for _, want := range []string{`href="/queues/orders"`, `href="/kv/carts"`, `data-f="due">1<`, `data-f="live">1<`, "/asyncapi.json", `href="/env"`} {
		if !strings.Contains(page, want) {
			t.Errorf("overview lacks %s", want)
		}
	}
}

func TestPeekPagesWithoutClaiming(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	q := e.queue("jobs")
	if err := q.Send(t.Context(), queue.JSON(map[string]any{"order": 7, "items": []int{1, 2}})); err != nil {
		t.Fatal(err)
	}
	if err := q.Send(t.Context(), queue.Text("plain")); err != nil {
		t.Fatal(err)
	}
	if err := q.Send(t.Context(), queue.Text("later"), queue.WithDelay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	type peek struct {
		Messages []messageJSON
		More     bool
	}
	for range 2 {
		p := decode[peek](t, e.want(http.MethodGet, "/api/queues/jobs/messages?limit=2", "", 200))
		if len(p.Messages) != 2 || !p.More {
			t.Fatalf("page 1 = %+v", p)
		}
		m := p.Messages[0]
		if m.Type != "json" || m.State != "due" || m.Attempt != 0 || !strings.Contains(m.Pretty, "\n  \"items\": [\n") || m.Size != len(m.Payload) {
			t.Errorf("first = %+v", m)
		}
	}
	p := decode[peek](t, e.want(http.MethodGet, "/api/queues/jobs/messages?limit=2&offset=2", "", 200))
	if len(p.Messages) != 1 || p.More || p.Messages[0].State != "delayed" {
		t.Errorf("page 2 = %+v", p)
	}
	// Peeking claimed nothing: the first receive gets attempt 1.
	got, err := q.Receive(t.Context(), 1)
	if err != nil || len(got) != 1 || got[0].Attempt != 1 {
		t.Fatalf("receive after peeks: %+v %v", got, err)
	}
	p = decode[peek](t, e.want(http.MethodGet, "/api/queues/jobs/messages", "", 200))
	if p.Messages[0].State != "inFlight" || p.Messages[0].Attempt != 1 {
		t.Errorf("after receive: %+v", p.Messages[0])
	}
	for _, bad := range []string{"limit=0", "limit=1001", "limit=x", "offset=-1", "offset=990&limit=20"} {
		b := e.want(http.MethodGet, "/api/queues/jobs/messages?"+bad, "", 400)
		field, _, _ := strings.Cut(bad, "=")
		if !strings.Contains(b, field) {
			t.Errorf("%s: error %s does not name %s", bad, b, field)
		}
	}
	e.want(http.MethodGet, "/api/queues/carts/messages", "", 400)
	page := e.want(http.MethodGet, "/queues/jobs", "", 200)
	if !strings.Contains(page, "&#34;items&#34;: [") || !strings.Contains(page, `class="state inFlight"`) {
		t.Errorf("queue page lacks the pretty JSON or the state")
	}
}

func TestSendPurgeAndTheirMistakes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.want(http.MethodPost, "/api/queues/jobs/send", `{"type":"json","data":"{\"a\": 1}"}`, 200)
	e.want(http.MethodPost, "/api/queues/jobs/send", `{"data":"soon","delay":"1h"}`, 200)
	if st := e.stats("jobs"); st.Due != 1 || st.Delayed != 1 {
		t.Fatalf("stats %+v", st)
	}
	ms, _ := e.queue("jobs").Peek(t.Context(), 10)
	if ms[0].Payload.Data != `{"a":1}` || ms[0].Payload.Type != queue.TypeJSON {
		t.Errorf("stored %+v", ms[0].Payload)
	}
	mistakes := map[string]string{
		`{"type":"json","data":"{nope"}`: "data: type json but not valid JSON",
		`{"type":"xml","data":"x"}`:      `type: must be text or json, got \"xml\"`,
		`{"data":"x","delay":"soon"}`:    "delay: must be a duration",
		`{"data":"x","delay":"13h"}`:     "delay: must be a duration between 0s and 12h0m0s",
		`{"data":"x","color":"red"}`:     `unknown field \"color\"`,
		``:                               "body: empty",
		`{"data":"` + strings.Repeat("x", queue.MaxPayloadBytes+1) + `"}`: "payload: must be at most 65536 bytes",
	}
	for body, want := range mistakes {
		b := e.want(http.MethodPost, "/api/queues/jobs/send", body, 400)
		if !strings.Contains(b, want) {
			t.Errorf("send %.40q: %s, want %q", body, b, want)
		}
	}
	b := e.want(http.MethodPost, "/api/queues/jobs/purge", `{"confirm":"job"}`, 400)
	if !strings.Contains(b, `confirm: type the binding name jobs to purge it, got \"job\"`) {
		t.Errorf("wrong confirm: %s", b)
	}
	if st := e.stats("jobs"); st.Total != 2 {
		t.Fatalf("a refused purge removed messages: %+v", st)
	}
	b = e.want(http.MethodPost, "/api/queues/jobs/purge", `{"confirm":"jobs"}`, 200)
	if decode[map[string]int](t, b)["purged"] != 2 || e.stats("jobs").Total != 0 {
		t.Errorf("purge: %s, total %d", b, e.stats("jobs").Total)
	}
	e.want(http.MethodPost, "/api/queues/nope/send", `{"data":"x"}`, 404)
	e.want(http.MethodPost, "/api/kv/jobs/put", `{"key":"k","value":"v"}`, 400)
}

// deadLetter moves one message of orders to orders-dlq as a consumer with
// the stack's policy would.
func deadLetter(t *testing.T, e *env, payload string) {
	t.Helper()
	rt := e.sup.Runtime()
	o, _ := rt.Binding("orders")
	d, _ := rt.Binding("orders-dlq")
	c, err := queue.Open(t.Context(), o.Path, queue.WithDeadLetter(1, d.Path), queue.WithBindingName("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(t.Context(), queue.Text(payload)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Receive(t.Context(), 1, queue.ReceiveVisibility(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.stats("orders-dlq").Total == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no dead letter after 5 s")
		}
		time.Sleep(5 * time.Millisecond)
		if _, err := c.Receive(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRedriveToOriginAndToABinding(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	deadLetter(t, e, "first")
	page := e.want(http.MethodGet, "/queues/orders-dlq", "", 200)
	for _, want := range []string{`id="redrive-form"`, `from <a href="/queues/orders">orders</a>`, "last error: delivered 1 times without an ack"} {
		if !strings.Contains(page, want) {
			t.Errorf("dlq page lacks %q", want)
		}
	}
	type peek struct{ Messages []messageJSON }
	p := decode[peek](t, e.want(http.MethodGet, "/api/queues/orders-dlq/messages", "", 200))
	if len(p.Messages) != 1 || p.Messages[0].Origin == nil || p.Messages[0].Origin.Binding != "orders" || p.Messages[0].Origin.Attempts != 1 {
		t.Fatalf("dlq messages = %+v", p.Messages)
	}
	b := e.want(http.MethodPost, "/api/queues/orders-dlq/redrive", `{}`, 200)
	if r := decode[map[string]int](t, b); r["moved"] != 1 {
		t.Fatalf("redrive: %s", b)
	}
	if e.stats("orders").Total != 1 || e.stats("orders-dlq").Total != 0 {
		t.Fatalf("after redrive: orders %d, dlq %d", e.stats("orders").Total, e.stats("orders-dlq").Total)
	}
	if err := e.queue("orders").Purge(t.Context()); err != nil {
		t.Fatal(err)
	}
	deadLetter(t, e, "second")
	b = e.want(http.MethodPost, "/api/queues/orders-dlq/redrive", `{"to":"jobs"}`, 200)
	if r := decode[map[string]int](t, b); r["moved"] != 1 || e.stats("jobs").Total != 1 {
		t.Fatalf("redrive to jobs: %s, jobs %d", b, e.stats("jobs").Total)
	}
	for body, want := range map[string]string{
		`{"to":"carts"}`:      "to: must be another queue binding",
		`{"to":"orders-dlq"}`: "to: must be another queue binding",
		`{"to":"nope"}`:       `to: no binding \"nope\"`,
		`{"max":-1}`:          "max: must be 0 (all) or more, got -1",
	} {
		if b := e.want(http.MethodPost, "/api/queues/orders-dlq/redrive", body, 400); !strings.Contains(b, want) {
			t.Errorf("redrive %s: %s, want %q", body, b, want)
		}
	}
}

func TestKVBrowsePutGetDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	k := e.kv("sessions")
	keys := []string{"-dash", "0zero", "A:1", "user:1", "user:2", "user:3", "zeta"}
	for _, key := range keys {
		if _, err := k.Put(t.Context(), key, []byte("v-"+key)); err != nil {
			t.Fatal(err)
		}
	}
	type page struct {
		Keys       []keyJSON
		NextCursor string
	}
	scanAll := func(prefix string, limit int) []string {
		var out []string
		cursor := ""
		for range 20 {
			p := decode[page](t, e.want(http.MethodGet, "/api/kv/sessions/keys?prefix="+prefix+"&limit="+strconv.Itoa(limit)+"&cursor="+cursor, "", 200))
			for _, k := range p.Keys {
				out = append(out, k.Key)
			}
			if len(p.Keys) > limit || (p.NextCursor != "" && len(p.Keys) != limit) {
				t.Fatalf("prefix %q limit %d: page of %d keys, next %q", prefix, limit, len(p.Keys), p.NextCursor)
			}
			if p.NextCursor == "" {
				return out
			}
			cursor = p.NextCursor
		}
		t.Fatal("no end of the scan")
		return nil
	}
	for _, limit := range []int{1, 2, 3, 7, 50} {
		if got := strings.Join(scanAll("", limit), ","); got != strings.Join(keys, ",") {
			t.Errorf("all keys, limit %d: %s", limit, got)
		}
	}
	if got := strings.Join(scanAll("user:", 2), ","); got != "user:1,user:2,user:3" {
		t.Errorf("prefix user: %s", got)
	}
	for _, bad := range []string{"cursor=all1.99.", "cursor=junk", "prefix=bad%20key", "prefix=user:&cursor=all1.0.", "limit=0"} {
		e.want(http.MethodGet, "/api/kv/sessions/keys?"+bad, "", 400)
	}

	e.want(http.MethodPost, "/api/kv/carts/put", `{"key":"cart:1","value":"{\"items\":[1,2]}","ttl":"1h"}`, 200)
	e.want(http.MethodPost, "/api/kv/carts/put", `{"key":"bin","value":"00ff10","encoding":"hex"}`, 200)
	b := e.want(http.MethodPost, "/api/kv/carts/put", `{"key":"cart:1","value":"other","ifNotExists":true}`, 200)
	if decode[map[string]bool](t, b)["written"] {
		t.Error("ifNotExists overwrote a live key")
	}
	v := decode[valueJSON](t, e.want(http.MethodGet, "/api/kv/carts/value?key=cart:1", "", 200))
	if v.Size != 15 || v.ExpiresAt == 0 || v.TTLMillis <= 59*60*1000 || !strings.Contains(v.JSON, "\"items\": [\n") || v.Text == nil {
		t.Errorf("cart:1 = %+v", v)
	}
	v = decode[valueJSON](t, e.want(http.MethodGet, "/api/kv/carts/value?key=bin", "", 200))
	if v.Size != 3 || v.Text != nil || !strings.HasPrefix(v.Hex, "00000000  00 ff 10") || v.ExpiresAt != 0 || v.Base64 != "AP8Q" {
		t.Errorf("bin = %+v", v)
	}
	page2 := e.want(http.MethodGet, "/kv/carts?key=cart:1", "", 200)
	if !strings.Contains(page2, "&#34;items&#34;: [") || !strings.Contains(page2, "15 bytes") || !strings.Contains(page2, "TTL ") {
		t.Error("kv page lacks the value, its size or its TTL")
	}
	for body, want := range map[string]string{
		`{"key":"bad key","value":"v"}`:                                         "key: may hold only",
		`{"key":"k","value":"zz","encoding":"hex"}`:                             "value: encoding hex but not hex digits",
		`{"key":"k","value":"v","encoding":"rot13"}`:                            `encoding: must be text, hex or base64, got \"rot13\"`,
		`{"key":"k","value":"v","ttl":"-1s"}`:                                   "ttl: must be a duration",
		`{"key":"k","value":"` + strings.Repeat("x", kv.MaxValueBytes+1) + `"}`: "value",
	} {
		if b := e.want(http.MethodPost, "/api/kv/carts/put", body, 400); !strings.Contains(b, want) {
			t.Errorf("put %.50s: %s, want %q", body, b, want)
		}
	}
	e.want(http.MethodPost, "/api/kv/carts/delete", `{"key":"bin"}`, 200)
	e.want(http.MethodGet, "/api/kv/carts/value?key=bin", "", 404)
	e.want(http.MethodGet, "/api/kv/carts/value?key=", "", 400)
}

// readEvents reads the event stream until match returns true or d passes.
func readEvents(t *testing.T, body io.Reader, d time.Duration, match func(Event) bool) bool {
	t.Helper()
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev Event
			if json.Unmarshal([]byte(data), &ev) == nil && match(ev) {
				found <- true
				return
			}
		}
		found <- false
	}()
	select {
	case ok := <-found:
		return ok
	case <-time.After(d):
		return false
	}
}

func TestEventStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, e.ts.URL+"/api/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	if !readEvents(t, res.Body, 5*time.Second, func(ev Event) bool { return ev.Kind == KindStats && ev.Binding == "jobs" }) {
		t.Fatal("no first stats event for jobs")
	}
	// A send by another handle (as another process would) shows as a
	// count delta; the send of the explorer as an action and a hint.
	if err := e.queue("jobs").Send(t.Context(), queue.Text("x")); err != nil {
		t.Fatal(err)
	}
	if !readEvents(t, res.Body, 5*time.Second, func(ev Event) bool {
		return ev.Kind == KindSent && ev.Binding == "jobs" && ev.Count == 1
	}) {
		t.Fatal("no sent event")
	}
	e.want(http.MethodPost, "/api/queues/jobs/send", `{"data":"y"}`, 200)
	kinds := map[string]bool{}
	if !readEvents(t, res.Body, 5*time.Second, func(ev Event) bool {
		if ev.Binding == "jobs" {
			kinds[ev.Kind] = true
		}
		if ev.Kind == KindStats && ev.Binding == "jobs" && ev.Stats.Queue.Due == 2 {
			kinds["due2"] = true
		}
		return kinds[KindAction] && kinds[KindHint] && kinds["due2"]
	}) {
		t.Fatalf("after an explorer send got %v, want action, hint and stats with due 2", kinds)
	}
	// A purge through the explorer is one row, its action: the read after
	// it shows the counts, not a "removed" row of its own.
	e.want(http.MethodPost, "/api/queues/jobs/purge", `{"confirm":"jobs"}`, 200)
	removed := false
	if !readEvents(t, res.Body, 5*time.Second, func(ev Event) bool {
		removed = removed || ev.Kind == KindRemoved && ev.Binding == "jobs"
		return ev.Kind == KindStats && ev.Binding == "jobs" && ev.Stats.Queue.Total == 0
	}) {
		t.Fatal("no stats with total 0 after the purge")
	}
	if removed {
		t.Error("the explorer's purge shows as a removed row besides its action row")
	}
	k := e.kv("carts")
	if _, err := k.Put(t.Context(), "n", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if !readEvents(t, res.Body, 5*time.Second, func(ev Event) bool {
		return ev.Kind == KindKeys && ev.Binding == "carts" && ev.Text == "+1 live key(s)"
	}) {
		t.Fatal("no keys event")
	}
	// A health change: the store directory disappears.
	rt := e.sup.Runtime()
	b, _ := rt.Binding("sessions")
	if err := os.Rename(b.Path, b.Path+".moved"); err != nil {
		t.Fatal(err)
	}
	e.sup.CheckHealth()
	if !readEvents(t, res.Body, 5*time.Second, func(ev Event) bool { return ev.Kind == KindHealth && ev.Binding == "sessions" }) {
		t.Fatal("no health event")
	}
	_ = os.Rename(b.Path+".moved", b.Path)
}

func TestTokenLogin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *Options) { o.Token = "s3cret" })
	res, _ := e.do(http.MethodGet, "/queues/jobs", "", nil)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login?next=%2Fqueues%2Fjobs" {
		t.Fatalf("page without login: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	for _, p := range []string{"/api/bindings", "/api/events"} {
		if res, _ := e.do(http.MethodGet, p, "", nil); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without login: %d", p, res.StatusCode)
		}
	}
	if res, _ := e.do(http.MethodPost, "/api/queues/jobs/send", `{"data":"x"}`, nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("send without login: %d", res.StatusCode)
	}
	login := func(token string) *http.Response {
		res, _ := e.do(http.MethodPost, "/login", "csrf="+e.srv.csrf+"&next=%2Fqueues%2Fjobs&token="+token,
			map[string]string{"Content-Type": "application/x-www-form-urlencoded", CSRFHeader: ""})
		return res
	}
	if res := login("wrong"); res.StatusCode != http.StatusUnauthorized || len(res.Cookies()) != 0 {
		t.Fatalf("wrong token: %d %v", res.StatusCode, res.Cookies())
	}
	res = login("s3cret")
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/queues/jobs" {
		t.Fatalf("login: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	cs := res.Cookies()
	if len(cs) != 1 || cs[0].Name != SessionCookie || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode || cs[0].Value == "s3cret" {
		t.Fatalf("cookie = %+v", cs)
	}
	cookie := map[string]string{"Cookie": SessionCookie + "=" + cs[0].Value}
	if res, b := e.do(http.MethodGet, "/queues/jobs", "", cookie); res.StatusCode != 200 {
		t.Fatalf("page with the cookie: %d %s", res.StatusCode, b)
	}
	if res, b := e.do(http.MethodPost, "/api/queues/jobs/send", `{"data":"x"}`, cookie); res.StatusCode != 200 {
		t.Fatalf("send with the cookie: %d %s", res.StatusCode, b)
	}
	if res, _ := e.do(http.MethodGet, "/api/bindings", "", map[string]string{"Authorization": "Bearer s3cret"}); res.StatusCode != 200 {
		t.Errorf("bearer: %d", res.StatusCode)
	}
	if res, _ := e.do(http.MethodGet, "/api/bindings", "", map[string]string{"Cookie": SessionCookie + "=forged"}); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("forged cookie: %d", res.StatusCode)
	}
	// The login never sends anyone to another site.
	for _, next := range []string{"//evil.example/", "http://evil.example/", "/\\evil.example"} {
		if got := safeNext(next); got != "/" {
			t.Errorf("safeNext(%q) = %q", next, got)
		}
	}
}

func TestEnvAsyncAPIAndAssets(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	b := e.want(http.MethodGet, "/api/env", "", 200)
	if strings.Contains(b, "hunter2") || !strings.Contains(b, "********") {
		t.Errorf("env not masked: %s", b)
	}
	if p := e.want(http.MethodGet, "/env", "", 200); strings.Contains(p, "hunter2") {
		t.Error("env page shows the secret")
	}
	if b := e.want(http.MethodGet, "/asyncapi.json", "", 200); !strings.Contains(b, "3.0.0") {
		t.Errorf("asyncapi: %s", b)
	}
	e.want(http.MethodGet, "/api/asyncapi", "", 200)
	for _, a := range []string{"/static/app.js", "/static/style.css"} {
		res, body := e.do(http.MethodGet, a, "", nil)
		if res.StatusCode != 200 || len(body) < 100 {
			t.Errorf("%s: %d, %d bytes", a, res.StatusCode, len(body))
		}
	}
	e.want(http.MethodGet, "/activity", "", 200)
	e.want(http.MethodGet, "/queues/nope", "", 404)
	e.want(http.MethodGet, "/kv/jobs", "", 400)
	e.want(http.MethodGet, "/nothing", "", 404)
	res, _ := e.do(http.MethodGet, "/", "", nil)
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("CSP = %q", csp)
	}
}

func TestKVPagesFollowTheCursor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	k := e.kv("carts")
	for i := range DefaultPageSize + 5 {
		if _, err := k.Put(t.Context(), "user:"+strconv.Itoa(1000+i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	for _, prefix := range []string{"user:", ""} {
		page := e.want(http.MethodGet, "/kv/carts?prefix="+prefix, "", 200)
		if n := strings.Count(page, `<tr class="key`); n != DefaultPageSize {
			t.Fatalf("prefix %q page 1: %d keys", prefix, n)
		}
		_, rest, ok := strings.Cut(page, `id="next-page" href="`)
		if !ok {
			t.Fatalf("prefix %q: no next link", prefix)
		}
		link, _, _ := strings.Cut(rest, `"`)
		link = strings.ReplaceAll(link, "&amp;", "&")
		page = e.want(http.MethodGet, link, "", 200)
		if n := strings.Count(page, `<tr class="key`); n != 5 || !strings.Contains(page, ">user:1050<") || strings.Contains(page, `id="next-page"`) {
			t.Errorf("prefix %q page 2 (%s): %d keys", prefix, link, n)
		}
	}
}

// TestDeadLetterLastError: a dead letter shows the handler's last error
// when Consume kept one, else why it could not be delivered, else that its
// attempts ran out.
func TestDeadLetterLastError(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		m    queue.PeekedMessage
		want string
	}{
		{queue.PeekedMessage{Origin: &queue.Origin{Attempts: 4}, LastError: "boom on attempt 4"}, "boom on attempt 4"},
		{queue.PeekedMessage{Origin: &queue.Origin{Attempts: 0, Reason: "enqueued_at is TEXT"}}, "enqueued_at is TEXT"},
		{queue.PeekedMessage{Origin: &queue.Origin{Attempts: 2}}, "delivered 2 times without an ack (maxAttempts used up)"},
	} {
		if got := toMessageJSON(c.m, now).Origin.LastError; got != c.want {
			t.Errorf("lastError %q; want %q", got, c.want)
		}
	}
}

// TestActivityRecordedWithoutListener: what happens while no tab listens is
// recorded (up starts the feed with the server) and a tab opened later
// gets it: one row per change, no hint rows in the history.
func TestActivityRecordedWithoutListener(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.srv.feed.start() // as Serve does
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		e.srv.feed.mu.Lock()
		read := !e.srv.feed.lastPoll.IsZero()
		e.srv.feed.mu.Unlock()
		if read {
			break // the counts before the send are known
		}
		if time.Now().After(deadline) {
			t.Fatal("the feed read no counts in 10 s")
		}
	}
	q := e.queue("jobs")
	if err := q.Send(t.Context(), queue.Text("x")); err != nil {
		t.Fatal(err)
	}
	// The counts are read every idlePollInterval without a listener:
	// wait until the feed has recorded the send, then open a tab.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		e.srv.feed.mu.Lock()
		n := len(e.srv.feed.history)
		e.srv.feed.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing recorded 10 s after a send with no tab open")
		}
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, e.ts.URL+"/api/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var history []Event
	if !readEvents(t, res.Body, 5*time.Second, func(ev Event) bool {
		if ev.Kind != KindStats {
			history = append(history, ev)
		}
		return ev.Kind == KindSent && ev.Binding == "jobs"
	}) {
		t.Fatalf("a tab opened after the send does not get it: %+v", history)
	}
	for _, ev := range history {
		if ev.Kind == KindHint {
			t.Errorf("the history holds a hint row: %+v", ev)
		}
	}
}
