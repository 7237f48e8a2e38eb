// Package sqsapi is the SQS-compatible front door that `localcloud up`
// serves over the stack's queue bindings, so that apps written against an
// AWS SDK (boto3, JavaScript v3, Go v2, the AWS CLI) run unchanged against
// localcloud's queues, on every engine.
//
// It is no queue of its own: every operation is a call of the public queue
// API (bindings/queue) on up's open handle of a binding (Source), or of the
// engine seam (internal/engine: a receipt's form, a store's location).
// Both wire protocols of SQS are served: AWS JSON 1.0 (X-Amz-Target:
// AmazonSQS.<Op>) and Query (Action=<Op>, XML in the 2012-11-05
// namespace), each with its own error shape and the codes SDKs map to
// their exceptions. Where SQS and localcloud differ, localcloud's contract
// holds (a stale receipt deletes nothing, messages are at most 64 KiB) and
// is answered in SQS's error shapes; README.md lists the differences.
package sqsapi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
)

// AccountID is the account of every queue URL and ARN.
const AccountID = "000000000000"

// DefaultRegion is the region of ARNs and of signatures when the stack
// sets none (config.DefaultSQSRegion).
const DefaultRegion = "us-east-1"

// maxBody bounds a request body: ten messages of 64 KiB, base64 message
// attributes and the protocol's overhead fit easily.
const maxBody = 4 << 20

// Source is what up serves: *supervisor.Supervisor implements it.
type Source interface {
	// Stack is the stack being served (it changes on reloads).
	Stack() *config.Stack
	// Queue returns the open handle of a queue binding.
	Queue(name string) (*queue.Queue, bool)
}

// Options configures New.
type Options struct {
	// Source gives the bindings and their handles. Required.
	Source Source
	// Endpoint is the base URL of queue URLs ("http://127.0.0.1:9324").
	// Required.
	Endpoint string
	// Region is the region of ARNs and signatures; DefaultRegion when "".
	Region string
	// AccessKeyID and SecretAccessKey, both set, make every request's
	// SigV4 signature checked; both "" accept any request.
	AccessKeyID, SecretAccessKey string
	// Conn is a connection to up's NATS server: a long-polling
	// ReceiveMessage wakes on the binding's hints there (sends of other
	// processes, leases ending). nil: it wakes on sends through this
	// process and on the queue's own wake-up signal only.
	Conn *nats.Conn
	// Logger receives the server's log lines. Defaults to discarding them.
	Logger *slog.Logger
	// Now is the clock of signatures and timestamps. Defaults to time.Now.
	Now func() time.Time
}

// Server is the SQS API of one up. Create it with New, serve it with
// Serve, stop it with Close.
type Server struct {
	opts    Options
	log     *slog.Logger
	wake    *waker
	sub     *nats.Subscription
	ctx     context.Context // canceled by Close: long polls return
	cancel  context.CancelFunc
	started time.Time

	mu    sync.Mutex
	srv   *http.Server
	tasks []moveTask // StartMessageMoveTask's, newest last
}

// New builds the server.
func New(opts Options) (*Server, error) {
	if opts.Source == nil || opts.Endpoint == "" {
		return nil, errors.New("sqsapi: Source and Endpoint are required")
	}
	if (opts.AccessKeyID == "") != (opts.SecretAccessKey == "") {
		return nil, errors.New("sqsapi: AccessKeyID and SecretAccessKey must be set together")
	}
	if opts.Region == "" {
		opts.Region = DefaultRegion
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Endpoint = strings.TrimSuffix(opts.Endpoint, "/")
	s := &Server{opts: opts, log: opts.Logger, wake: newWaker(), started: opts.Now()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if opts.Conn != nil {
		subj := "localcloud." + opts.Source.Stack().Name + ".*.available"
		sub, err := opts.Conn.Subscribe(subj, func(m *nats.Msg) {
			parts := strings.Split(m.Subject, ".")
			if len(parts) == 4 {
				s.wake.fire(parts[2])
			}
		})
		if err != nil {
			s.cancel()
			return nil, fmt.Errorf("sqsapi: subscribe to the hints on %s: %w", subj, err)
		}
		s.sub = sub
	}
	return s, nil
}

// Endpoint is the endpoint URL of a listener's address.
func Endpoint(addr net.Addr) string { return "http://" + addr.String() }

// Serve serves on ln in a goroutine until Close.
func (s *Server) Serve(ln net.Listener) {
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return s.ctx }}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("SQS API stopped", "err", err)
		}
	}()
}

// Close ends the long polls (they answer with what they have: nothing) and
// stops the server within ctx.
func (s *Server) Close(ctx context.Context) error {
	s.cancel()
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.Shutdown(ctx)
}

// call is one request being answered.
type call struct {
	pr   proto
	op   string
	p    params
	path string // the URL path, which a Query request may use as its QueueUrl
}

// ServeHTTP answers one SQS request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reqID := newRequestID()
	pr := protoQuery
	target := r.Header.Get("X-Amz-Target")
	if target != "" || strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-amz-json") {
		pr = protoJSON
	}
	c, aerr := s.decode(r, pr, target)
	if aerr != nil {
		writeError(w, pr, reqID, aerr)
		return
	}
	out, aerr := s.dispatch(r.Context(), c)
	if aerr != nil {
		if aerr.code.server {
			s.log.Warn("SQS request failed", "op", c.op, "err", aerr.msg)
		}
		writeError(w, pr, reqID, aerr)
		return
	}
	writeResult(w, pr, c.op, reqID, out)
}

// decode reads and authenticates a request.
func (s *Server) decode(r *http.Request, pr proto, target string) (*call, *apiError) {
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		return nil, errf(codeInvalidAction, "method %s: SQS requests are POST (or GET for the Query protocol)", r.Method)
	}
	body, aerr := readBody(r, maxBody)
	if aerr != nil {
		return nil, aerr
	}
	if s.opts.AccessKeyID != "" {
		if aerr := s.verify(r, body); aerr != nil {
			return nil, aerr
		}
	}
	c := &call{pr: pr, path: r.URL.Path}
	if pr == protoJSON {
		if !strings.HasPrefix(target, targetPfx) {
			return nil, errf(codeInvalidAction, "header X-Amz-Target must be %s<Operation>, got %q", targetPfx, target)
		}
		c.op = strings.TrimPrefix(target, targetPfx)
		c.p, aerr = decodeJSON(body)
		return c, aerr
	}
	form := r.URL.Query()
	if len(body) > 0 {
		bf, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, errf(codeInvalidParameterValue, "the request body is not a form (application/x-www-form-urlencoded): %v", err)
		}
		if len(form) == 0 {
			form = bf // the usual POST: everything is in the body
		} else {
			for k, v := range bf {
				form[k] = append(form[k], v...)
			}
		}
	}
	c.op = form.Get("Action")
	if c.op == "" {
		return nil, errf(codeMissingParameter, "the request must contain the parameter Action (Query protocol) or the header X-Amz-Target (JSON protocol)")
	}
	c.p, aerr = decodeQuery(form)
	return c, aerr
}

// handler is one operation.
type handler func(s *Server, ctx context.Context, c *call) (obj, *apiError)

var handlers map[string]handler

func init() {
	handlers = map[string]handler{
		"GetQueueUrl":                  (*Server).getQueueURL,
		"ListQueues":                   (*Server).listQueues,
		"CreateQueue":                  (*Server).createQueue,
		"DeleteQueue":                  (*Server).deleteQueue,
		"GetQueueAttributes":           (*Server).getQueueAttributes,
		"SetQueueAttributes":           (*Server).setQueueAttributes,
		"PurgeQueue":                   (*Server).purgeQueue,
		"SendMessage":                  (*Server).sendMessage,
		"SendMessageBatch":             (*Server).sendMessageBatch,
		"ReceiveMessage":               (*Server).receiveMessage,
		"DeleteMessage":                (*Server).deleteMessage,
		"DeleteMessageBatch":           (*Server).deleteMessageBatch,
		"ChangeMessageVisibility":      (*Server).changeMessageVisibility,
		"ChangeMessageVisibilityBatch": (*Server).changeMessageVisibilityBatch,
		"ListDeadLetterSourceQueues":   (*Server).listDeadLetterSourceQueues,
		"StartMessageMoveTask":         (*Server).startMessageMoveTask,
		"ListMessageMoveTasks":         (*Server).listMessageMoveTasks,
		"CancelMessageMoveTask":        (*Server).cancelMessageMoveTask,
		"TagQueue":                     (*Server).tagQueue,
		"UntagQueue":                   (*Server).untagQueue,
		"ListQueueTags":                (*Server).listQueueTags,
	}
}

// unsupported are the operations of SQS that localcloud does not offer,
// with what to do instead.
var unsupported = map[string]string{
	"AddPermission":    "queue policies are not supported: on localcloud every client that reaches the endpoint (and signs with the stack's keys, when set) may use every queue",
	"RemovePermission": "queue policies are not supported: on localcloud every client that reaches the endpoint (and signs with the stack's keys, when set) may use every queue",
}

func (s *Server) dispatch(ctx context.Context, c *call) (obj, *apiError) {
	if why, ok := unsupported[c.op]; ok {
		return nil, errf(codeUnsupportedOperation, "%s is not supported by localcloud's SQS API: %s", c.op, why)
	}
	h, ok := handlers[c.op]
	if !ok {
		return nil, errf(codeInvalidAction, "the action %s is not valid for this endpoint", c.op)
	}
	return s.vanished(c)(h(s, ctx, c))
}

// target is the queue a request names.
type target struct {
	name string
	b    config.Binding
	q    *queue.Queue
	st   *config.Stack
}

// queueURL is the URL of queue name.
func (s *Server) queueURL(name string) string {
	return s.opts.Endpoint + "/" + AccountID + "/" + name
}

// arn is the ARN of queue name.
func (s *Server) arn(name string) string {
	return "arn:aws:sqs:" + s.opts.Region + ":" + AccountID + ":" + name
}

// nameOfARN is the queue name of an ARN of this server's form.
func (s *Server) nameOfARN(field, arn string) (string, *apiError) {
	pfx := "arn:aws:sqs:" + s.opts.Region + ":" + AccountID + ":"
	if !strings.HasPrefix(arn, pfx) || len(arn) == len(pfx) {
		return "", errf(codeInvalidParameterValue, "value %s for parameter %s is invalid: must be a queue ARN %s<name>", arn, field, pfx)
	}
	return strings.TrimPrefix(arn, pfx), nil
}

// binding finds the served queue binding whose SQS name is name.
func (s *Server) binding(name string) (*target, *apiError) {
	st := s.opts.Source.Stack()
	b, ok := st.SQSQueue(name)
	if ok {
		if q, open := s.opts.Source.Queue(b.Name); open {
			return &target{name: name, b: *b, q: q, st: st}, nil
		}
	}
	return nil, errf(codeQueueDoesNotExist, "the specified queue does not exist: %s is not a queue binding served by stack %s", name, st.Name)
}

// queueOf is the queue of the request's QueueUrl (any host; the path
// /000000000000/<name>), or of a Query request's URL path.
func (s *Server) queueOf(c *call) (*target, *apiError) {
	raw, aerr := c.p.str("QueueUrl")
	if aerr != nil {
		return nil, aerr
	}
	path := c.path
	if raw != "" {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, errf(codeInvalidParameterValue, "value %s for parameter QueueUrl is invalid: %v", raw, err)
		}
		path = u.Path
	} else if c.pr == protoJSON || path == "" || path == "/" {
		return nil, errf(codeMissingParameter, "the request must contain the parameter QueueUrl")
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) != 2 || parts[0] != AccountID || parts[1] == "" {
		return nil, errf(codeQueueDoesNotExist, "the specified queue does not exist: URL path %q is not /%s/<queue name>", path, AccountID)
	}
	return s.binding(parts[1])
}

// queueFailed is the answer to an error of the queue API.
func queueFailed(op string, err error) *apiError {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return errf(codeServiceUnavailable, "%s: the request ended before the queue answered: %v", op, err)
	}
	return errf(codeInternalFailure, "%s: %v", op, err)
}

// requestIDs makes the x-amzn-RequestId of each request: a version 4
// UUID of a random prefix, drawn once per process, and a counter. It is
// for clients' logs only, so it needs to be unique, not unpredictable,
// and a request then reads no randomness of the system.
var requestIDs struct {
	prefix [8]byte
	seq    atomic.Uint64
}

func init() {
	p := uuid.New()
	copy(requestIDs.prefix[:], p[:8])
}

// newRequestID is the next request's x-amzn-RequestId.
func newRequestID() string {
	var u uuid.UUID
	copy(u[:8], requestIDs.prefix[:])
	binary.BigEndian.PutUint64(u[8:], requestIDs.seq.Add(1))
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return u.String()
}
