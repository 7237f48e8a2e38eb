package sqsapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
)

// The attributes of a queue (GetQueueAttributes), in SQS's order.
var queueAttrNames = []string{
	"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed",
	"CreatedTimestamp", "LastModifiedTimestamp", "QueueArn", "VisibilityTimeout", "DelaySeconds",
	"ReceiveMessageWaitTimeSeconds", "MaximumMessageSize", "MessageRetentionPeriod", "RedrivePolicy",
	"SqsManagedSseEnabled",
}

// countAttrs are the attributes read from the queue's stats.
var countAttrs = map[string]bool{"ApproximateNumberOfMessages": true, "ApproximateNumberOfMessagesNotVisible": true,
	"ApproximateNumberOfMessagesDelayed": true}

// retentionSeconds is the MessageRetentionPeriod reported: SQS's maximum,
// 14 days. localcloud keeps a message until it is deleted or purged.
const retentionSeconds = 14 * 24 * 3600

// redrivePolicy is the RedrivePolicy attribute of b ("" without a
// dead-letter policy).
func (s *Server) redrivePolicy(st *config.Stack, b config.Binding) string {
	if b.MaxAttempts <= 0 || b.DeadLetter == "" {
		return ""
	}
	js, _ := json.Marshal(struct {
		DeadLetterTargetArn string `json:"deadLetterTargetArn"`
		MaxReceiveCount     int    `json:"maxReceiveCount"`
	}{s.arn(sqsNameOf(st, b.DeadLetter)), b.MaxAttempts})
	return string(js)
}

// sqsNameOf is the SQS name of the binding called binding.
func sqsNameOf(st *config.Stack, binding string) string {
	if b, ok := st.Binding(binding); ok {
		return b.SQSName()
	}
	return binding
}

// attrs returns the attributes names of t (every one for "All").
func (s *Server) attrs(ctx context.Context, t *target, names []string) (map[string]any, *apiError) {
	want := map[string]bool{}
	for _, n := range names {
		if n == "All" {
			for _, a := range queueAttrNames {
				want[a] = true
			}
			continue
		}
		known := false
		for _, a := range queueAttrNames {
			known = known || a == n
		}
		if !known {
			return nil, errf(codeInvalidAttributeName, "unknown attribute name %s: localcloud's queues have %s", n, strings.Join(queueAttrNames, ", "))
		}
		want[n] = true
	}
	out := map[string]any{}
	var st queue.Stats
	for n := range want {
		if countAttrs[n] {
			var err error
			if st, err = t.q.Stats(ctx); err != nil {
				return nil, queueFailed("GetQueueAttributes", err)
			}
			break
		}
	}
	ts := strconv.FormatInt(s.started.Unix(), 10)
	for n := range want {
		var v string
		switch n {
		case "ApproximateNumberOfMessages":
			v = strconv.FormatInt(st.Due, 10)
		case "ApproximateNumberOfMessagesNotVisible":
			v = strconv.FormatInt(st.InFlight-st.Delayed, 10)
		case "ApproximateNumberOfMessagesDelayed":
			v = strconv.FormatInt(st.Delayed, 10)
		case "CreatedTimestamp", "LastModifiedTimestamp":
			v = ts
			if t.b.SQS.Created > 0 {
				v = strconv.FormatInt(t.b.SQS.Created, 10)
			}
		case "QueueArn":
			v = s.arn(t.name)
		case "VisibilityTimeout":
			v = strconv.FormatInt(int64(visibilityOf(t.b)/time.Second), 10)
		case "DelaySeconds":
			v = strconv.Itoa(t.b.SQS.DelaySeconds)
		case "ReceiveMessageWaitTimeSeconds":
			v = strconv.Itoa(t.b.SQS.WaitTimeSeconds)
		case "MaximumMessageSize":
			v = strconv.Itoa(queue.MaxPayloadBytes)
		case "MessageRetentionPeriod":
			v = strconv.Itoa(retentionSeconds)
			if t.b.SQS.RetentionSeconds > 0 {
				v = strconv.Itoa(t.b.SQS.RetentionSeconds)
			}
		case "RedrivePolicy":
			if v = s.redrivePolicy(t.st, t.b); v == "" {
				continue
			}
		case "SqsManagedSseEnabled":
			v = "false"
		}
		out[n] = v
	}
	return out, nil
}

// visibilityOf is b's default lease.
func visibilityOf(b config.Binding) time.Duration {
	if b.VisibilityTimeout > 0 {
		return b.VisibilityTimeout
	}
	return queue.DefaultVisibility
}

func (s *Server) getQueueURL(_ context.Context, c *call) (obj, *apiError) {
	name, aerr := c.p.required("QueueName")
	if aerr != nil {
		return nil, aerr
	}
	if _, aerr := s.binding(name); aerr != nil {
		return nil, aerr
	}
	return obj{{"QueueUrl", s.queueURL(name)}}, nil
}

func (s *Server) listQueues(_ context.Context, c *call) (obj, *apiError) {
	prefix, aerr := c.p.str("QueueNamePrefix")
	if aerr != nil {
		return nil, aerr
	}
	max, aerr := c.p.num("MaxResults", 1, 1000, 1000)
	if aerr != nil {
		return nil, aerr
	}
	tok, aerr := c.p.str("NextToken")
	if aerr != nil {
		return nil, aerr
	}
	after := ""
	if tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			return nil, errf(codeInvalidParameterValue, "value %s for parameter NextToken is invalid: not a token this server issued", tok)
		}
		after = string(b)
	}
	var names []string
	for _, b := range s.opts.Source.Stack().Bindings {
		n := b.SQSName()
		if b.Type != config.TypeQueue || !strings.HasPrefix(n, prefix) || n <= after {
			continue
		}
		if _, open := s.opts.Source.Queue(b.Name); open {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := obj{}
	next := ""
	if len(names) > max {
		names = names[:max]
		next = base64.RawURLEncoding.EncodeToString([]byte(names[max-1]))
	}
	urls := list{item: "QueueUrl"}
	for _, n := range names {
		urls.items = append(urls.items, s.queueURL(n))
	}
	if len(urls.items) > 0 {
		out = append(out, field{"QueueUrls", urls})
	}
	if next != "" && c.p.given("MaxResults") {
		out = append(out, field{"NextToken", next})
	}
	return out, nil
}

// fifoRefusal is the answer to a FIFO queue.
func fifoRefusal(name string) *apiError {
	return errf(codeUnsupportedOperation, "queue %s: FIFO queues are not supported: localcloud's queues are standard queues "+
		"(no message groups, no exactly-once deduplication by MessageDeduplicationId, no .fifo names); use a standard queue", name)
}

func (s *Server) createQueue(ctx context.Context, c *call) (obj, *apiError) {
	name, aerr := c.p.required("QueueName")
	if aerr != nil {
		return nil, aerr
	}
	asked, aerr := c.p.strMap("Attributes")
	if aerr != nil {
		return nil, aerr
	}
	if strings.HasSuffix(name, ".fifo") || strings.EqualFold(asked["FifoQueue"], "true") {
		return nil, fifoRefusal(name)
	}
	tags, aerr := c.p.strMap("tags") // the JSON protocol's name
	if aerr != nil {
		return nil, aerr
	}
	if tags == nil {
		if tags, aerr = c.p.strMap("Tags"); aerr != nil { // Query: Tag.N.Key/Value
			return nil, aerr
		}
	}
	if t, aerr := s.binding(name); aerr == nil {
		if aerr := s.sameAttrs(ctx, t, asked, "CreateQueue"); aerr != nil {
			return nil, aerr
		}
		return obj{{"QueueUrl", s.queueURL(name)}}, nil
	}
	st := s.opts.Source.Stack()
	if b, ok := st.Binding(name); ok {
		return nil, errf(codeInvalidParameterValue, "value %s for parameter QueueName is invalid: %s is a %s binding of the stack file %s, not a queue",
			name, name, b.Type, st.File)
	}
	if err := config.CheckCreatedQueueName(name); err != nil {
		return nil, errf(codeInvalidParameterValue, "value %s for parameter QueueName is invalid: %v", name, err)
	}
	admin, ok := s.opts.Source.(Admin)
	if !ok {
		return nil, errf(codeUnsupportedOperation, "CreateQueue %s: this server serves the stack's bindings only; add a binding named %s of type queue to %s", name, name, st.File)
	}
	q, aerr := s.newQueue(st, name, asked)
	if aerr != nil {
		return nil, aerr
	}
	if err := config.CheckSQSTags(tags); err != nil {
		return nil, errf(codeInvalidParameterValue, "parameter tags: %v", err)
	}
	if err := admin.CreateQueue(ctx, q, tags); err != nil {
		if t, aerr := s.binding(name); aerr == nil { // created meanwhile by another request
			if aerr := s.sameAttrs(ctx, t, asked, "CreateQueue"); aerr != nil {
				return nil, aerr
			}
			return obj{{"QueueUrl", s.queueURL(name)}}, nil
		}
		if errors.Is(err, config.ErrSQSLimit) || errors.Is(err, config.ErrBindingTaken) {
			return nil, errf(codeInvalidParameterValue, "CreateQueue %s: %v", name, err)
		}
		return nil, queueFailed("CreateQueue "+name, err)
	}
	if _, aerr := s.binding(name); aerr != nil {
		return nil, errf(codeInternalFailure, "CreateQueue %s: the queue was created but is not served; see up's log", name)
	}
	return obj{{"QueueUrl", s.queueURL(name)}}, nil
}

// sameAttrs checks that the attributes asked of a queue are those it has:
// they come from the stack file, which the SQS API does not change.
func (s *Server) sameAttrs(ctx context.Context, t *target, asked map[string]string, op string) *apiError {
	if len(asked) == 0 {
		return nil
	}
	names := make([]string, 0, len(asked))
	for n := range asked {
		if countAttrs[n] || n == "QueueArn" || n == "CreatedTimestamp" || n == "LastModifiedTimestamp" {
			return errf(codeInvalidAttributeName, "attribute %s is read-only", n)
		}
		names = append(names, n)
	}
	sort.Strings(names)
	have, aerr := s.attrs(ctx, t, names)
	if aerr != nil {
		return aerr
	}
	for _, n := range names {
		cur, _ := have[n].(string)
		if !sameAttr(n, cur, asked[n]) {
			c := codeInvalidAttributeValue
			if op == "CreateQueue" {
				c = codeQueueNameExists
			}
			if t.b.Created {
				return errf(c, "%s %s: attribute %s is %q, asked %q: change a created queue's attributes with SetQueueAttributes", op, t.name, n, cur, asked[n])
			}
			return errf(c, "%s %s: attribute %s is %q, asked %q: a binding's settings come from the stack file %s (bindings.%s), "+
				"which the SQS API does not change", op, t.name, n, cur, asked[n], t.st.File, t.name)
		}
	}
	return nil
}

// sameAttr compares an attribute's value with one asked for: JSON
// policies by their content.
func sameAttr(name, have, asked string) bool {
	if name != "RedrivePolicy" {
		return have == asked
	}
	var a, b struct {
		Target string `json:"deadLetterTargetArn"`
		Max    any    `json:"maxReceiveCount"`
	}
	if json.Unmarshal([]byte(have), &a) != nil || json.Unmarshal([]byte(asked), &b) != nil {
		return have == asked
	}
	return a.Target == b.Target && strings.Trim(jsonString(a.Max), `"`) == strings.Trim(jsonString(b.Max), `"`)
}

func jsonString(v any) string { js, _ := json.Marshal(v); return string(js) }

func (s *Server) setQueueAttributes(ctx context.Context, c *call) (obj, *apiError) {
	t, aerr := s.queueOf(c)
	if aerr != nil {
		return nil, aerr
	}
	asked, aerr := c.p.strMap("Attributes")
	if aerr != nil {
		return nil, aerr
	}
	if admin, ok := s.opts.Source.(Admin); ok && t.b.Created && len(asked) > 0 {
		return nil, s.updateQueue(ctx, t, admin, asked)
	}
	return nil, s.sameAttrs(ctx, t, asked, "SetQueueAttributes")
}

func (s *Server) deleteQueue(ctx context.Context, c *call) (obj, *apiError) {
	t, aerr := s.queueOf(c)
	if aerr != nil {
		return nil, aerr
	}
	admin, ok := s.opts.Source.(Admin)
	if !t.b.Created || !ok {
		return nil, errf(codeUnsupportedOperation, "DeleteQueue %s: the queue is a binding of the stack file %s; remove the binding there to stop serving it (its store is kept)",
			t.name, t.st.File)
	}
	if o := t.st.DeadLetterOrigins(t.b.Name); len(o) > 0 {
		return nil, errf(codeInvalidParameterValue, "DeleteQueue %s: queue %s dead-letters into it (RedrivePolicy); delete %s first", t.name, o[0].SQSName(), o[0].SQSName())
	}
	if err := admin.DeleteQueue(ctx, t.b.Name); err != nil {
		if _, aerr := s.binding(t.name); aerr != nil {
			return nil, errf(codeQueueDoesNotExist, "the specified queue does not exist: %s (%v)", t.name, err)
		}
		return nil, queueFailed("DeleteQueue "+t.name, err)
	}
	return nil, nil
}

func (s *Server) getQueueAttributes(ctx context.Context, c *call) (obj, *apiError) {
	t, aerr := s.queueOf(c)
	if aerr != nil {
		return nil, aerr
	}
	names, aerr := c.p.strs("AttributeNames")
	if aerr != nil {
		return nil, aerr
	}
	m, aerr := s.attrs(ctx, t, names)
	if aerr != nil {
		return nil, aerr
	}
	if len(m) == 0 {
		return obj{}, nil
	}
	return obj{{"Attributes", newPairs("Attribute", "Name", "Value", m)}}, nil
}

func (s *Server) purgeQueue(ctx context.Context, c *call) (obj, *apiError) {
	t, aerr := s.queueOf(c)
	if aerr != nil {
		return nil, aerr
	}
	if err := t.q.Purge(ctx); err != nil {
		return nil, queueFailed("PurgeQueue", err)
	}
	return nil, nil
}

func (s *Server) listDeadLetterSourceQueues(_ context.Context, c *call) (obj, *apiError) {
	t, aerr := s.queueOf(c)
	if aerr != nil {
		return nil, aerr
	}
	urls := list{item: "QueueUrl"}
	for _, o := range t.st.DeadLetterOrigins(t.b.Name) {
		urls.items = append(urls.items, s.queueURL(o.SQSName()))
	}
	return obj{{"queueUrls", urls}}, nil
}

// moveTask is a finished StartMessageMoveTask: the redrive runs within the
// request.
type moveTask struct {
	handle, source, dest string
	moved                int
	started              time.Time
	failure              string
}

// maxTasks bounds the move tasks remembered.
const maxTasks = 100

func (s *Server) startMessageMoveTask(ctx context.Context, c *call) (obj, *apiError) {
	srcARN, aerr := c.p.required("SourceArn")
	if aerr != nil {
		return nil, aerr
	}
	dstARN, aerr := c.p.str("DestinationArn")
	if aerr != nil {
		return nil, aerr
	}
	if _, aerr := c.p.num("MaxNumberOfMessagesPerSecond", 1, 500, 0); aerr != nil {
		return nil, aerr
	}
	srcName, aerr := s.nameOfARN("SourceArn", srcARN)
	if aerr != nil {
		return nil, aerr
	}
	src, aerr := s.binding(srcName)
	if aerr != nil {
		return nil, aerr
	}
	var opts []queue.RedriveOption
	if dstARN != "" {
		dstName, aerr := s.nameOfARN("DestinationArn", dstARN)
		if aerr != nil {
			return nil, aerr
		}
		dst, aerr := s.binding(dstName)
		if aerr != nil {
			return nil, aerr
		}
		opts = append(opts, queue.RedriveTo(engine.Location(dst.b)))
	} else if len(src.st.DeadLetterOrigins(src.b.Name)) == 0 {
		return nil, errf(codeInvalidParameterValue, "value %s for parameter SourceArn is invalid: queue %s is no binding's deadLetter queue; give DestinationArn", srcARN, srcName)
	}
	task := moveTask{handle: uuid.NewString(), source: srcARN, dest: dstARN, started: s.opts.Now()}
	res, err := src.q.Redrive(ctx, opts...)
	task.moved = res.Moved
	if err != nil {
		task.failure = err.Error()
	}
	s.mu.Lock()
	s.tasks = append(s.tasks, task)
	if len(s.tasks) > maxTasks {
		s.tasks = s.tasks[len(s.tasks)-maxTasks:]
	}
	s.mu.Unlock()
	if err != nil {
		return nil, queueFailed("StartMessageMoveTask", err)
	}
	return obj{{"TaskHandle", task.handle}}, nil
}

func (s *Server) listMessageMoveTasks(_ context.Context, c *call) (obj, *apiError) {
	srcARN, aerr := c.p.required("SourceArn")
	if aerr != nil {
		return nil, aerr
	}
	max, aerr := c.p.num("MaxResults", 1, 10, 1)
	if aerr != nil {
		return nil, aerr
	}
	results := list{item: "ListMessageMoveTasksResultEntry"}
	s.mu.Lock()
	for i := len(s.tasks) - 1; i >= 0 && len(results.items) < max; i-- {
		t := s.tasks[i]
		if t.source != srcARN {
			continue
		}
		status := "COMPLETED"
		e := obj{{"Status", status}, {"SourceArn", t.source}}
		if t.dest != "" {
			e = append(e, field{"DestinationArn", t.dest})
		}
		e = append(e, field{"ApproximateNumberOfMessagesMoved", t.moved}, field{"StartedTimestamp", int(t.started.UnixMilli())})
		if t.failure != "" {
			e[0].v = "FAILED"
			e = append(e, field{"FailureReason", t.failure})
		}
		results.items = append(results.items, e)
	}
	s.mu.Unlock()
	return obj{{"Results", results}}, nil
}

func (s *Server) cancelMessageMoveTask(_ context.Context, c *call) (obj, *apiError) {
	h, aerr := c.p.required("TaskHandle")
	if aerr != nil {
		return nil, aerr
	}
	return nil, errf(codeResourceNotFound, "task %s is not running: localcloud runs a message move task to its end within StartMessageMoveTask", h)
}
