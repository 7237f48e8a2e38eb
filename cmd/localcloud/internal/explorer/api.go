package explorer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/supervisor"
)

// Limits of the API.
const (
	// MaxBodyBytes bounds a request body: a queue payload or a KV value
	// (hex encoded) with room for the JSON around it.
	MaxBodyBytes = 2*queue.MaxPayloadBytes + 4096
	// MaxPageSize is the most messages or keys one request returns.
	MaxPageSize = 1000
	// opTimeout bounds one store operation of a request.
	opTimeout = 10 * time.Second
)

type apiError struct {
	Error string `json:"error"`
	// Code is the store's error code (INVALID_INPUT, ...) when a store
	// refused the request.
	Code string `json:"code,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// httpError is a refusal with its status.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf(format, args...)}
}

// writeErr answers err: its status for an httpError, 400 for a store's
// INVALID_INPUT, 500 otherwise.
func writeErr(w http.ResponseWriter, err error) {
	var he *httpError
	if errors.As(err, &he) {
		writeJSON(w, he.status, apiError{Error: he.msg})
		return
	}
	code := bindings.CodeOf(err)
	status := http.StatusInternalServerError
	if code == bindings.CodeInvalidInput {
		status = http.StatusBadRequest
	}
	writeJSON(w, status, apiError{Error: err.Error(), Code: string(code)})
}

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /api/session", s.apiSession)
	m.HandleFunc("GET /api/bindings", s.apiBindings)
	m.HandleFunc("GET /api/bindings/{name}", s.apiBinding)
	m.HandleFunc("GET /api/queues/{name}/messages", s.apiPeek)
	m.HandleFunc("POST /api/queues/{name}/send", s.apiSend)
	m.HandleFunc("POST /api/queues/{name}/purge", s.apiPurge)
	m.HandleFunc("POST /api/queues/{name}/redrive", s.apiRedrive)
	m.HandleFunc("GET /api/kv/{name}/keys", s.apiScan)
	m.HandleFunc("GET /api/kv/{name}/value", s.apiGet)
	m.HandleFunc("POST /api/kv/{name}/put", s.apiPut)
	m.HandleFunc("POST /api/kv/{name}/delete", s.apiDelete)
	m.HandleFunc("GET /api/events", s.feed.serve)
	m.HandleFunc("GET /api/asyncapi", s.apiAsyncAPI)
	m.HandleFunc("GET /api/env", s.apiEnv)
	m.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, apiError{Error: "path: no API endpoint " + quoteTrunc(r.Method+" "+r.URL.Path) + "; docs/HTTP.md lists them"})
	})
	s.pageRoutes(m)
	s.mux = m
}

func (s *Server) apiSession(w http.ResponseWriter, r *http.Request) {
	rt := s.opts.Source.Runtime()
	writeJSON(w, http.StatusOK, map[string]any{"csrfToken": s.csrf, "readOnly": s.opts.ReadOnly, "stack": rt.Stack})
}

// bindingJSON is one binding with its counts.
type bindingJSON struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Engine string `json:"engine"`
	Path   string `json:"path"`
	Health string `json:"health"`
	// Subject, DeadLetter and MaxAttempts are set for queues.
	Subject     string `json:"subject,omitempty"`
	DeadLetter  string `json:"deadLetter,omitempty"`
	MaxAttempts int    `json:"maxAttempts,omitempty"`
	// DeadLetterFor lists the queues whose deadLetter this queue is.
	DeadLetterFor []string        `json:"deadLetterFor,omitempty"`
	Queue         *queueStatsJSON `json:"queue,omitempty"`
	KV            *kvStatsJSON    `json:"kv,omitempty"`
	// CountError says why the counts are missing.
	CountError string `json:"countError,omitempty"`
}

type queueStatsJSON struct {
	Due         int64 `json:"due"`
	Delayed     int64 `json:"delayed"`
	InFlight    int64 `json:"inFlight"` // leased: received and not acked
	Total       int64 `json:"total"`
	DeadLetters int64 `json:"deadLetters"`
	Moving      int64 `json:"moving"`
	// Oldest is the enqueue time of the oldest message, unix ms; 0 when
	// empty. OldestAgeMillis is its age.
	Oldest          int64        `json:"oldest"`
	OldestAgeMillis int64        `json:"oldestAgeMillis"`
	Origins         []originJSON `json:"origins,omitempty"`
}

type originJSON struct {
	Binding string `json:"binding"`
	Store   string `json:"store"`
	Count   int64  `json:"count"`
}

type kvStatsJSON struct {
	Live    int64 `json:"live"`
	Expired int64 `json:"expired"`
}

// describe builds the summary of one binding with its counts.
func (s *Server) describe(ctx context.Context, rt supervisor.Runtime, b supervisor.RuntimeBinding) bindingJSON {
	out := bindingJSON{Name: b.Name, Type: b.Type, Path: b.Path, Health: b.Health, Subject: b.Subject, DeadLetter: b.DeadLetter, MaxAttempts: b.MaxAttempts,
		Engine: s.opts.Source.Describe(b.Name)}
	if out.Engine == "" {
		out.Engine = b.Engine // not open
	}
	for _, o := range rt.Bindings {
		if o.DeadLetter == b.Name {
			out.DeadLetterFor = append(out.DeadLetterFor, o.Name)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	switch b.Type {
	case "queue":
		q, ok := s.opts.Source.Queue(b.Name)
		if !ok {
			out.CountError = "not open"
			return out
		}
		st, err := q.Stats(ctx)
		if err != nil {
			out.CountError = err.Error()
			return out
		}
		out.Queue = queueStats(st, s.opts.Now())
	case "kv":
		k, release, err := s.opts.Source.KV(ctx, b.Name)
		if errors.Is(err, supervisor.ErrNotServed) {
			out.CountError = "not open"
			return out
		}
		if err != nil {
			out.CountError = err.Error()
			return out
		}
		defer release()
		st, err := k.Stats(ctx)
		if err != nil {
			out.CountError = err.Error()
			return out
		}
		out.KV = &kvStatsJSON{Live: st.Live, Expired: st.Expired}
	}
	return out
}

func queueStats(st queue.Stats, now time.Time) *queueStatsJSON {
	q := &queueStatsJSON{Due: st.Due, Delayed: st.Delayed, InFlight: st.Leased(), Total: st.Total, DeadLetters: st.DeadLetters, Moving: st.Moving}
	if !st.Oldest.IsZero() {
		q.Oldest = st.Oldest.UnixMilli()
		q.OldestAgeMillis = max(0, now.Sub(st.Oldest).Milliseconds())
	}
	for _, o := range st.Origins {
		q.Origins = append(q.Origins, originJSON{Binding: o.Binding, Store: o.Store, Count: o.Count})
	}
	return q
}

func (s *Server) allBindings(ctx context.Context) []bindingJSON {
	rt := s.opts.Source.Runtime()
	out := make([]bindingJSON, 0, len(rt.Bindings))
	for _, b := range rt.Bindings {
		out = append(out, s.describe(ctx, rt, b))
	}
	return out
}

func (s *Server) apiBindings(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"bindings": s.allBindings(r.Context())})
}

// lookup returns the runtime binding called name.
func (s *Server) lookup(name string) (supervisor.Runtime, supervisor.RuntimeBinding, error) {
	rt := s.opts.Source.Runtime()
	b, ok := rt.Binding(name)
	if !ok {
		return rt, b, notFound("binding: no binding %s in stack %s", quoteTrunc(name), rt.Stack)
	}
	return rt, b, nil
}

func (s *Server) apiBinding(w http.ResponseWriter, r *http.Request) {
	rt, b, err := s.lookup(r.PathValue("name"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.describe(r.Context(), rt, b))
}

// openQueue returns the handle of the queue binding called name.
func (s *Server) openQueue(name string) (*queue.Queue, supervisor.RuntimeBinding, error) {
	_, b, err := s.lookup(name)
	if err != nil {
		return nil, b, err
	}
	if b.Type != "queue" {
		return nil, b, badRequest("binding: %s is a %s binding, not a queue", b.Name, b.Type)
	}
	q, ok := s.opts.Source.Queue(name)
	if !ok {
		return nil, b, &httpError{status: http.StatusServiceUnavailable, msg: "binding: " + name + " is not open (reloading?)"}
	}
	return q, b, nil
}

// openKV returns the handle of the KV binding called name and its
// release, which the caller calls once done (Source.KV).
func (s *Server) openKV(ctx context.Context, name string) (*kv.Store, func(), error) {
	_, b, err := s.lookup(name)
	if err != nil {
		return nil, nil, err
	}
	if b.Type != "kv" {
		return nil, nil, badRequest("binding: %s is a %s binding, not a kv store", b.Name, b.Type)
	}
	k, release, err := s.opts.Source.KV(ctx, name)
	if errors.Is(err, supervisor.ErrNotServed) {
		return nil, nil, &httpError{status: http.StatusServiceUnavailable, msg: "binding: " + name + " is not open (reloading?)"}
	}
	if err != nil {
		return nil, nil, &httpError{status: http.StatusServiceUnavailable, msg: "binding: " + err.Error()}
	}
	return k, release, nil
}

// intParam reads an integer query parameter in [lo, hi].
func intParam(r *http.Request, name string, def, lo, hi int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, badRequest("%s: must be an integer between %d and %d, got %s", name, lo, hi, quoteTrunc(v))
	}
	return n, nil
}

// messageJSON is one peeked message.
type messageJSON struct {
	ID         int64  `json:"id"`
	Attempt    int    `json:"attempt"`
	EnqueuedAt int64  `json:"enqueuedAt"` // unix ms
	VisibleAt  int64  `json:"visibleAt"`  // unix ms
	State      string `json:"state"`      // due, delayed, inFlight, moving
	Type       string `json:"type"`       // text or json
	Payload    string `json:"payload"`    // as stored
	// Pretty is a JSON payload indented; "" for text.
	Pretty string      `json:"pretty,omitempty"`
	Size   int         `json:"size"` // bytes of the payload as stored
	Origin *originInfo `json:"origin,omitempty"`
	// Attributes are the message's attributes; absent if none.
	Attributes queue.Attributes `json:"attributes,omitempty"`
}

type originInfo struct {
	Binding  string `json:"binding"`
	Store    string `json:"store"`
	ID       int64  `json:"id"`
	Attempts int    `json:"attempts"`
	MovedAt  int64  `json:"movedAt"`
	// LastReceipt is the receipt of its last delivery there: the last
	// error localcloud records for a dead letter is that its attempts ran
	// out.
	LastReceipt string `json:"lastReceipt,omitempty"`
	LastError   string `json:"lastError"`
}

func messageState(m queue.PeekedMessage, now time.Time) string {
	switch {
	case m.Moving:
		return "moving"
	case !m.VisibleAt.After(now):
		return "due"
	case m.Attempt == 0:
		return "delayed"
	}
	return "inFlight"
}

func toMessageJSON(m queue.PeekedMessage, now time.Time) messageJSON {
	out := messageJSON{ID: m.ID, Attempt: m.Attempt, EnqueuedAt: m.EnqueuedAt.UnixMilli(), VisibleAt: m.VisibleAt.UnixMilli(),
		State: messageState(m, now), Type: string(m.Payload.Type), Payload: m.Payload.Data, Size: len(m.Payload.Data), Attributes: m.Attributes}
	if m.Payload.Type == queue.TypeJSON {
		out.Pretty = prettyJSON(m.Payload.Data)
	}
	if o := m.Origin; o != nil {
		out.Origin = &originInfo{Binding: o.Binding, Store: o.Store, ID: o.ID, Attempts: o.Attempts, MovedAt: o.MovedAt.UnixMilli(), LastReceipt: o.LastReceipt,
			LastError: fmt.Sprintf("delivered %d times without an ack (maxAttempts used up)", o.Attempts)}
		switch {
		case m.LastError != "": // the handler's own error, kept by Consume
			out.Origin.LastError = m.LastError
		case o.Reason != "": // not spent but undeliverable in its queue
			out.Origin.LastError = o.Reason
		}
	}
	return out
}

// prettyJSON indents valid JSON, keeping its strings as written (no HTML
// escapes: the page escapes); anything else comes back as it is.
func prettyJSON(s string) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, []byte(s), "", "  "); err != nil {
		return s
	}
	return buf.String()
}

// peekPage returns the messages [offset, offset+limit) in delivery order.
// Peek reads from the head, so a page ends at most at MaxPeekLimit.
func peekPage(ctx context.Context, q *queue.Queue, offset, limit int) ([]queue.PeekedMessage, bool, error) {
	n := min(offset+limit+1, queue.MaxPeekLimit)
	ms, err := q.Peek(ctx, n)
	if err != nil {
		return nil, false, err
	}
	more := len(ms) > offset+limit
	if offset >= len(ms) {
		return nil, false, nil
	}
	return ms[offset:min(len(ms), offset+limit)], more, nil
}

func (s *Server) apiPeek(w http.ResponseWriter, r *http.Request) {
	q, _, err := s.openQueue(r.PathValue("name"))
	if err != nil {
		writeErr(w, err)
		return
	}
	limit, err := intParam(r, "limit", DefaultPageSize, 1, MaxPageSize)
	if err != nil {
		writeErr(w, err)
		return
	}
	offset, err := intParam(r, "offset", 0, 0, queue.MaxPeekLimit-1)
	if err != nil {
		writeErr(w, err)
		return
	}
	if offset+limit > queue.MaxPeekLimit {
		writeErr(w, badRequest("offset+limit: must be at most %d (peek reads from the head of the queue), got %d", queue.MaxPeekLimit, offset+limit))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	ms, more, err := peekPage(ctx, q, offset, limit)
	if err != nil {
		writeErr(w, err)
		return
	}
	now := s.opts.Now()
	out := make([]messageJSON, 0, len(ms))
	for _, m := range ms {
		out = append(out, toMessageJSON(m, now))
	}
	writeJSON(w, http.StatusOK, map[string]any{"binding": r.PathValue("name"), "offset": offset, "messages": out, "more": more})
}

// decodeBody reads a JSON request body into v, refusing unknown fields
// and bodies over MaxBodyBytes.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &httpError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body: must be at most %d bytes", MaxBodyBytes)}
		}
		if errors.Is(err, io.EOF) {
			return badRequest("body: empty; send a JSON object (docs/HTTP.md)")
		}
		return badRequest("body: not the expected JSON object: %v", err)
	}
	if dec.More() {
		return badRequest("body: more than one JSON value")
	}
	return nil
}

// parseDuration reads an optional duration field ("" is zero).
func parseDuration(field, v string, maxD time.Duration) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > maxD {
		return 0, badRequest("%s: must be a duration between 0s and %s such as 30s or 5m, got %s", field, maxD, quoteTrunc(v))
	}
	return d, nil
}

type sendRequest struct {
	// Type is "text" (default) or "json".
	Type string `json:"type"`
	Data string `json:"data"`
	// Delay is a Go duration ("10s"); "" sends a due message.
	Delay string `json:"delay"`
}

func (s *Server) apiSend(w http.ResponseWriter, r *http.Request) {
	q, b, err := s.openQueue(r.PathValue("name"))
	if err != nil {
		writeErr(w, err)
		return
	}
	var req sendRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	var p queue.Payload
	switch req.Type {
	case "", "text":
		p = queue.Text(req.Data)
	case "json":
		if !json.Valid([]byte(req.Data)) {
			writeErr(w, badRequest("data: type json but not valid JSON (%d bytes)", len(req.Data)))
			return
		}
		p = queue.JSON(json.RawMessage(req.Data))
	default:
		writeErr(w, badRequest("type: must be text or json, got %s", quoteTrunc(req.Type)))
		return
	}
	delay, err := parseDuration("delay", req.Delay, queue.MaxDelay)
	if err != nil {
		writeErr(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	var opts []queue.SendOption
	if delay > 0 {
		opts = append(opts, queue.WithDelay(delay))
	}
	defer s.feed.begin(b.Name)()
	if err := q.Send(ctx, p, opts...); err != nil {
		writeErr(w, err)
		return
	}
	if delay == 0 {
		s.feed.hint(b)
	}
	s.feed.action(b.Name, "send", fmt.Sprintf("sent a %s message of %d bytes from the explorer", p.Type, len(p.Data)))
	writeJSON(w, http.StatusOK, map[string]any{"sent": 1})
}

type purgeRequest struct {
	// Confirm must be the binding's name.
	Confirm string `json:"confirm"`
}

func (s *Server) apiPurge(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	q, b, err := s.openQueue(name)
	if err != nil {
		writeErr(w, err)
		return
	}
	var req purgeRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	if req.Confirm != name {
		writeErr(w, badRequest("confirm: type the binding name %s to purge it, got %s", name, quoteTrunc(req.Confirm)))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	st, _ := q.Stats(ctx)
	defer s.feed.begin(b.Name)()
	if err := q.Purge(ctx); err != nil {
		writeErr(w, err)
		return
	}
	s.feed.action(b.Name, "purge", fmt.Sprintf("purged from the explorer (%d messages)", st.Total))
	writeJSON(w, http.StatusOK, map[string]any{"purged": st.Total})
}

type redriveRequest struct {
	// To names the queue binding to redrive to; "" redrives each message
	// to its origin.
	To string `json:"to"`
	// Max redrives at most this many; 0 all.
	Max int `json:"max"`
}

func (s *Server) apiRedrive(w http.ResponseWriter, r *http.Request) {
	q, b, err := s.openQueue(r.PathValue("name"))
	if err != nil {
		writeErr(w, err)
		return
	}
	var req redriveRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	var opts []queue.RedriveOption
	var target *supervisor.RuntimeBinding
	if req.To != "" {
		_, tb, err := s.lookup(req.To)
		if err != nil {
			writeErr(w, badRequest("to: no binding %s in this stack", quoteTrunc(req.To)))
			return
		}
		if tb.Type != "queue" || tb.Name == b.Name {
			writeErr(w, badRequest("to: must be another queue binding than %s, got %s (%s)", b.Name, tb.Name, tb.Type))
			return
		}
		target = &tb
		opts = append(opts, queue.RedriveTo(tb.Path))
	}
	if req.Max < 0 {
		writeErr(w, badRequest("max: must be 0 (all) or more, got %d", req.Max))
		return
	}
	if req.Max > 0 {
		opts = append(opts, queue.RedriveMax(req.Max))
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	defer s.feed.begin(b.Name)()
	res, err := q.Redrive(ctx, opts...)
	if err != nil {
		writeErr(w, err)
		return
	}
	rt := s.opts.Source.Runtime()
	if target != nil {
		s.feed.hint(*target)
	} else {
		for _, o := range rt.Bindings {
			if o.DeadLetter == b.Name {
				s.feed.hint(o)
			}
		}
	}
	dest := "their origins"
	if target != nil {
		dest = target.Name
	}
	s.feed.action(b.Name, "redrive", fmt.Sprintf("redrove %d messages to %s from the explorer (%d skipped: no recorded origin)", res.Moved, dest, res.Skipped))
	writeJSON(w, http.StatusOK, map[string]any{"moved": res.Moved, "skipped": res.Skipped})
}

func (s *Server) apiAsyncAPI(w http.ResponseWriter, r *http.Request) {
	if s.opts.AsyncAPI == nil {
		writeErr(w, notFound("asyncapi: not available"))
		return
	}
	doc, err := s.opts.AsyncAPI()
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_, _ = w.Write(doc)
}

// maskedEnv returns the app environment with secrets masked.
func (s *Server) maskedEnv() ([]EnvVar, error) {
	if s.opts.Env == nil {
		return nil, notFound("env: not available")
	}
	vars, err := s.opts.Env()
	if err != nil {
		return nil, err
	}
	vars = slices.Clone(vars)
	for i := range vars {
		if vars[i].Secret {
			vars[i].Value = "********"
		}
	}
	return vars, nil
}

func (s *Server) apiEnv(w http.ResponseWriter, r *http.Request) {
	vars, err := s.maskedEnv()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"env": vars})
}
