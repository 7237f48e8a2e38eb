package sqsapi

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
)

// Admin is what a Source offers beyond serving the stack's bindings: the
// queues the SQS API creates and deletes, and every queue's tags, kept in
// the stack's config.SQSStateFile. *supervisor.Supervisor implements it;
// without it CreateQueue of a new name, DeleteQueue and the tag operations
// are refused.
type Admin interface {
	// CreateQueue creates q with tags and returns once it is served.
	CreateQueue(ctx context.Context, q config.CreatedQueue, tags map[string]string) error
	// UpdateQueue changes the attributes of a queue CreateQueue created
	// (not its engine) and returns once they are served.
	UpdateQueue(ctx context.Context, q config.CreatedQueue) error
	// DeleteQueue deletes a queue CreateQueue created, with its store;
	// name is its binding name, as for QueueTags and TagQueue.
	DeleteQueue(ctx context.Context, name string) error
	// QueueTags returns a queue's tags.
	QueueTags(name string) (map[string]string, error)
	// TagQueue sets the tags set and removes the keys unset.
	TagQueue(name string, set map[string]string, unset []string) error
}

// createAttrs are the attributes CreateQueue of a new queue takes.
var createAttrs = []string{"VisibilityTimeout", "DelaySeconds", "ReceiveMessageWaitTimeSeconds", "MessageRetentionPeriod",
	"RedrivePolicy", "MaximumMessageSize", "SqsManagedSseEnabled"}

// newQueue is the queue CreateQueue creates for name with the attributes
// asked. Its engine is the dead-letter queue's when RedrivePolicy names
// one (a pair is on one engine), else the one engine of the stack file's
// queue bindings when they all use one (a JetStream stack gets JetStream
// queues, with the replicas of its first queue), else sqlite.
func (s *Server) newQueue(st *config.Stack, name string, asked map[string]string) (config.CreatedQueue, *apiError) {
	q := config.CreatedQueue{Name: name, VisibilityTimeout: int(config.DefaultVisibilityTimeout / time.Second),
		RetentionPeriod: config.DefaultSQSRetentionSecs, Created: s.opts.Now().Unix()}
	dl, aerr := s.applyAttrs(&q, asked, "CreateQueue")
	if aerr != nil {
		return q, aerr
	}
	q.Engine, q.Replicas = config.EngineSQLite, 0
	template := dl
	if template == nil {
		for i, b := range st.Bindings {
			if b.Type != config.TypeQueue || b.Created {
				continue
			}
			if template != nil && template.Engine != b.Engine {
				template = nil
				break
			}
			if template == nil {
				template = &st.Bindings[i]
			}
		}
	}
	if template != nil && template.Engine == config.EngineJetStream {
		q.Engine, q.Replicas = config.EngineJetStream, max(template.Replicas, 1)
	}
	if !config.IsBindingName(name) {
		q.Binding = config.DeriveBindingName(name)
	}
	if err := q.Check(); err != nil {
		return q, errf(codeInvalidAttributeValue, "CreateQueue %s: %v", name, err)
	}
	return q, nil
}

// applyAttrs sets the attributes asked of q (op names the operation in
// errors); it returns the dead-letter queue a RedrivePolicy names.
func (s *Server) applyAttrs(q *config.CreatedQueue, asked map[string]string, op string) (*config.Binding, *apiError) {
	names := make([]string, 0, len(asked))
	for n := range asked {
		names = append(names, n)
	}
	sort.Strings(names)
	num := func(n string, lo, hi int) (int, *apiError) {
		v, err := strconv.Atoi(asked[n])
		if err != nil || v < lo || v > hi {
			return 0, errf(codeInvalidAttributeValue, "invalid value for the parameter %s: must be an integer from %d to %d, got %q", n, lo, hi, asked[n])
		}
		return v, nil
	}
	var dl *config.Binding
	for _, n := range names {
		var aerr *apiError
		switch n {
		case "VisibilityTimeout":
			q.VisibilityTimeout, aerr = num(n, int(config.VisibilityTimeoutMin/time.Second), int(config.VisibilityTimeoutMax/time.Second))
		case "DelaySeconds":
			q.DelaySeconds, aerr = num(n, 0, config.MaxSQSDelaySeconds)
		case "ReceiveMessageWaitTimeSeconds":
			q.WaitTimeSeconds, aerr = num(n, 0, config.MaxSQSWaitSeconds)
		case "MessageRetentionPeriod":
			q.RetentionPeriod, aerr = num(n, config.MinSQSRetentionSecs, config.MaxSQSRetentionSecs)
		case "MaximumMessageSize":
			if asked[n] != strconv.Itoa(queue.MaxPayloadBytes) {
				aerr = errf(codeInvalidAttributeValue, "invalid value for the parameter MaximumMessageSize: localcloud's queues hold messages of at most %d bytes (the store format's limit), got %q; leave it out or give %d",
					queue.MaxPayloadBytes, asked[n], queue.MaxPayloadBytes)
			}
		case "SqsManagedSseEnabled":
			if asked[n] != "false" {
				aerr = errf(codeInvalidAttributeValue, "invalid value for the parameter SqsManagedSseEnabled: localcloud's stores are not encrypted, got %q; leave it out or give false", asked[n])
			}
		case "RedrivePolicy":
			if asked[n] == "" { // SQS: an empty policy removes it
				q.MaxReceiveCount, q.DeadLetter, dl = 0, "", nil
				continue
			}
			dl, aerr = s.redriveOf(q, asked[n])
		default:
			aerr = errf(codeInvalidAttributeName, "unknown, read-only or unsupported attribute %s for %s: localcloud's queues take %s", n, op, strings.Join(createAttrs, ", "))
		}
		if aerr != nil {
			return nil, aerr
		}
	}
	return dl, nil
}

// createdOf is the CreatedQueue a created binding came from.
func createdOf(b config.Binding) config.CreatedQueue {
	binding := ""
	if b.SQS.Name != "" {
		binding = b.Name
	}
	return config.CreatedQueue{Name: b.SQSName(), Binding: binding, Engine: b.Engine, Replicas: b.Replicas, VisibilityTimeout: int(b.VisibilityTimeout / time.Second),
		DelaySeconds: b.SQS.DelaySeconds, WaitTimeSeconds: b.SQS.WaitTimeSeconds, RetentionPeriod: b.SQS.RetentionSeconds,
		MaxReceiveCount: b.MaxAttempts, DeadLetter: b.DeadLetter, Created: b.SQS.Created}
}

// updateQueue is SetQueueAttributes of a created queue: its attributes
// change (the engine stays), answered once up serves them.
func (s *Server) updateQueue(ctx context.Context, t *target, admin Admin, asked map[string]string) *apiError {
	q := createdOf(t.b)
	dl, aerr := s.applyAttrs(&q, asked, "SetQueueAttributes")
	if aerr != nil {
		return aerr
	}
	if dl != nil {
		if dl.Engine != q.Engine {
			return errf(codeInvalidAttributeValue, "invalid value for the parameter RedrivePolicy: queue %s uses engine %s but %s uses engine %s; a dead-letter pair must be on one engine",
				q.Name, q.Engine, dl.SQSName(), dl.Engine)
		}
		for cur, i := dl, 0; cur != nil && i <= len(t.st.Bindings); i++ {
			if cur.Name == q.BindingName() {
				return errf(codeInvalidAttributeValue, "invalid value for the parameter RedrivePolicy: dead-letter cycle through %s: messages would move around it forever", dl.SQSName())
			}
			next, ok := t.st.Binding(cur.DeadLetter)
			if !ok || cur.MaxAttempts == 0 {
				break
			}
			cur = next
		}
	}
	if err := q.Check(); err != nil {
		return errf(codeInvalidAttributeValue, "SetQueueAttributes %s: %v", q.Name, err)
	}
	if err := admin.UpdateQueue(ctx, q); err != nil {
		return queueFailed("SetQueueAttributes "+q.Name, err)
	}
	return nil
}

// redriveOf reads a RedrivePolicy into q; it returns the dead-letter queue.
func (s *Server) redriveOf(q *config.CreatedQueue, policy string) (*config.Binding, *apiError) {
	var rp struct {
		Target string `json:"deadLetterTargetArn"`
		Max    any    `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(policy), &rp); err != nil || rp.Target == "" {
		return nil, errf(codeInvalidAttributeValue, "invalid value for the parameter RedrivePolicy: must be JSON with deadLetterTargetArn and maxReceiveCount, got %q", policy)
	}
	n, err := strconv.Atoi(strings.Trim(jsonString(rp.Max), `"`))
	if err != nil || n < config.MaxAttemptsMin || n > config.MaxAttemptsMax {
		return nil, errf(codeInvalidAttributeValue, "invalid value for the parameter RedrivePolicy: maxReceiveCount must be %d to %d, got %s", config.MaxAttemptsMin, config.MaxAttemptsMax, jsonString(rp.Max))
	}
	dlName, aerr := s.nameOfARN("RedrivePolicy.deadLetterTargetArn", rp.Target)
	if aerr != nil {
		return nil, aerr
	}
	dl, aerr := s.binding(dlName)
	if aerr != nil {
		return nil, errf(codeInvalidAttributeValue, "invalid value for the parameter RedrivePolicy: deadLetterTargetArn %s is no queue served by this endpoint", rp.Target)
	}
	if dlName == q.Name {
		return nil, errf(codeInvalidAttributeValue, "invalid value for the parameter RedrivePolicy: the dead-letter queue must be another queue, got %s itself", dlName)
	}
	q.MaxReceiveCount, q.DeadLetter = n, dl.b.Name
	return &dl.b, nil
}

// vanished turns the server-side failure of an operation on a queue that
// DeleteQueue deleted meanwhile (its handle closed under the request, a
// long poll for one) into SQS's answer for a deleted queue.
func (s *Server) vanished(c *call) func(obj, *apiError) (obj, *apiError) {
	return func(out obj, aerr *apiError) (obj, *apiError) {
		if aerr == nil || !aerr.code.server {
			return out, aerr
		}
		if _, gone := s.queueOf(c); gone != nil && gone.code == codeQueueDoesNotExist {
			return nil, gone
		}
		return out, aerr
	}
}

// withQueueDelay gives a SendMessage without DelaySeconds the queue's.
func withQueueDelay(p params, t *target) {
	if !p.given("DelaySeconds") && t.b.SQS.DelaySeconds > 0 {
		p["DelaySeconds"] = strconv.Itoa(t.b.SQS.DelaySeconds)
	}
}

// delayOf is a send's delay: the one asked, else the queue's DelaySeconds.
func delayOf(p params, t *target, asked int) int {
	if p.given("DelaySeconds") {
		return asked
	}
	return t.b.SQS.DelaySeconds
}

// admin is the Source's Admin, or the refusal of op.
func (s *Server) admin(op string) (Admin, *apiError) {
	a, ok := s.opts.Source.(Admin)
	if !ok {
		return nil, errf(codeUnsupportedOperation, "%s is not supported by this server: it keeps no state of its own", op)
	}
	return a, nil
}

func (s *Server) tagQueue(_ context.Context, c *call) (obj, *apiError) {
	t, aerr := s.queueOf(c)
	if aerr != nil {
		return nil, aerr
	}
	tags, aerr := c.p.strMap("Tags")
	if aerr != nil {
		return nil, aerr
	}
	if len(tags) == 0 {
		return nil, errf(codeMissingParameter, "the request must contain the parameter Tags")
	}
	a, aerr := s.admin("TagQueue")
	if aerr != nil {
		return nil, aerr
	}
	if err := a.TagQueue(t.b.Name, tags, nil); err != nil {
		return nil, tagFailed("TagQueue", t.name, err)
	}
	return nil, nil
}

func (s *Server) untagQueue(_ context.Context, c *call) (obj, *apiError) {
	t, aerr := s.queueOf(c)
	if aerr != nil {
		return nil, aerr
	}
	keys, aerr := c.p.strs("TagKeys")
	if aerr != nil {
		return nil, aerr
	}
	if len(keys) == 0 {
		return nil, errf(codeMissingParameter, "the request must contain the parameter TagKeys")
	}
	a, aerr := s.admin("UntagQueue")
	if aerr != nil {
		return nil, aerr
	}
	if err := a.TagQueue(t.b.Name, nil, keys); err != nil {
		return nil, tagFailed("UntagQueue", t.name, err)
	}
	return nil, nil
}

func (s *Server) listQueueTags(_ context.Context, c *call) (obj, *apiError) {
	t, aerr := s.queueOf(c)
	if aerr != nil {
		return nil, aerr
	}
	a, aerr := s.admin("ListQueueTags")
	if aerr != nil {
		return nil, aerr
	}
	tags, err := a.QueueTags(t.b.Name)
	if err != nil {
		return nil, tagFailed("ListQueueTags", t.name, err)
	}
	if len(tags) == 0 {
		return obj{}, nil
	}
	m := make(map[string]any, len(tags))
	for k, v := range tags {
		m[k] = v
	}
	return obj{{"Tags", newPairs("Tag", "Key", "Value", m)}}, nil
}

// tagFailed is the answer to a failed tag change: SQS's limits are the
// client's to fix.
func tagFailed(op, name string, err error) *apiError {
	if errors.Is(err, config.ErrSQSLimit) {
		return errf(codeInvalidParameterValue, "%s %s: %v", op, name, err)
	}
	return queueFailed(op+" "+name, err)
}
