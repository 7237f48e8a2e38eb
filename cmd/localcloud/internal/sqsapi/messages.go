package sqsapi

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine"
)

// Limits of SQS that localcloud keeps.
const (
	maxBatchEntries   = 10
	maxDelaySeconds   = 900
	maxWaitSeconds    = 20
	maxVisibilitySecs = 43200 // queue.MaxVisibility
)

var batchIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

// md5Hex is the hex MD5 of s, as MD5OfMessageBody.
func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// messageIDSpace is the UUID namespace of received messages' ids.
var messageIDSpace = uuid.MustParse("6b1c3f0e-6c8e-4a57-9a43-2f3c2f0a5e11")

// receivedID is the MessageId of a message: the same at its send and at
// every receive of it.
func receivedID(q *queue.Queue, id int64) string {
	return uuid.NewSHA1(messageIDSpace, []byte(q.Location()+"\x00"+strconv.FormatInt(id, 10))).String()
}

// sentID is the MessageId a send answers for a message the engine gave id
// (queue.SendResult.IDs): receivedID. An engine that cannot know the id at
// the send (0: the JetStream engine's delayed sends) gets a random one,
// which its receives do not show.
func sentID(q *queue.Queue, id int64) string {
	if id == 0 {
		return uuid.NewString()
	}
	return receivedID(q, id)
}

// validBody checks a message body: at most queue.MaxPayloadBytes bytes
// (localcloud's limit, lower than SQS's) of the characters SQS allows.
func validBody(field, body string) *apiError {
	if body == "" {
		return errf(codeMissingParameter, "the request must contain the parameter %s (a message of 1 to %d bytes)", field, queue.MaxPayloadBytes)
	}
	if len(body) > queue.MaxPayloadBytes {
		return errf(codeInvalidParameterValue, "one or more parameters are invalid. Reason: %s must be shorter than %d bytes "+
			"(localcloud's limit; SQS allows more), got %d bytes; nothing was stored", field, queue.MaxPayloadBytes+1, len(body))
	}
	for i, r := range body {
		ok := r == 0x9 || r == 0xA || r == 0xD || (r >= 0x20 && r <= 0xD7FF) || (r >= 0xE000 && r <= 0xFFFD) || (r >= 0x10000 && r <= 0x10FFFF)
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(body[i:]); n <= 1 {
				ok = false
			}
		}
		if !ok {
			return errf(codeInvalidMessageContents, "%s: invalid character %U at byte %d; SQS allows #x9, #xA, #xD, #x20-#xD7FF, #xE000-#xFFFD, #x10000-#x10FFFF", field, r, i)
		}
	}
	return nil
}

// sendEntry is one checked message to send.
type sendEntry struct {
	id    string // the batch entry's Id; "" for SendMessage
	body  string
	delay int
	attrs queue.Attributes // message and system attributes (attrs.go); nil for none
}

// sendAnswer is the fields of a send's answer about one message.
func (e sendEntry) sendAnswer(messageID string) obj {
	out := obj{{"MessageId", messageID}, {"MD5OfMessageBody", md5Hex(e.body)}}
	msg, sys := split(e.attrs)
	if s := md5OfAttrs(msg); s != "" {
		out = append(out, field{"MD5OfMessageAttributes", s})
	}
	if s := md5OfAttrs(sys); s != "" {
		out = append(out, field{"MD5OfMessageSystemAttributes", s})
	}
	return out
}

// checkSend checks the parameters of one message, named with pfx in
// errors ("" for SendMessage, "Entries.N." in a batch).
func checkSend(p params, pfx string) (sendEntry, *apiError) {
	var e sendEntry
	body, aerr := p.str("MessageBody")
	if aerr != nil {
		return e, aerr
	}
	if aerr := validBody(pfx+"MessageBody", body); aerr != nil {
		return e, aerr
	}
	e.body = body
	if e.delay, aerr = p.num("DelaySeconds", 0, maxDelaySeconds, 0); aerr != nil {
		return e, aerr
	}
	attrs, size, aerr := sendAttrs(p, pfx)
	if aerr != nil {
		return e, aerr
	}
	if total := len(body) + size; total > queue.MaxPayloadBytes {
		return e, errf(codeInvalidParameterValue, "one or more parameters are invalid. Reason: %sMessageBody and message attributes must be shorter than %d bytes together "+
			"(localcloud's limit; SQS allows more), got %d bytes (body %d, attributes %d); nothing was stored", pfx, queue.MaxPayloadBytes+1, total, len(body), size)
	}
	e.attrs = attrs
	for _, f := range []string{"MessageDeduplicationId", "MessageGroupId"} {
		if p.given(f) {
			return e, errf(codeInvalidParameterValue, "%s%s: the parameter is for FIFO queues, and localcloud's queues are standard queues; leave it out (nothing was stored)", pfx, f)
		}
	}
	return e, nil
}

func (s *Server) sendMessage(ctx context.Context, c *call) (obj, *apiError) {
	t, aerr := s.queueOf(c)
	if aerr != nil {
		return nil, aerr
	}
	withQueueDelay(c.p, t)
	e, aerr := checkSend(c.p, "")
	if aerr != nil {
		return nil, aerr
	}
	var r queue.SendResult
	opts := []queue.SendOption{queue.WithDelay(time.Duration(e.delay) * time.Second), queue.WithSendResult(&r)}
	if e.attrs != nil {
		opts = append(opts, queue.WithAttributes(e.attrs))
	}
	if err := t.q.Send(ctx, queue.Text(e.body), opts...); err != nil {
		return nil, queueFailed("SendMessage", err)
	}
	return e.sendAnswer(sentID(t.q, r.IDs[0])), nil
}

// batchOf is the queue and the checked entries of a batch operation.
func (s *Server) batchOf(c *call) (*target, []params, []string, *apiError) {
	t, aerr := s.queueOf(c)
	if aerr != nil {
		return nil, nil, nil, aerr
	}
	es, ids, aerr := checkBatch(c)
	return t, es, ids, aerr
}

// checkBatch checks the entries of a batch request: 1..10, distinct ids of
// the allowed form.
func checkBatch(c *call) ([]params, []string, *apiError) {
	es, aerr := c.p.entries("Entries")
	if aerr != nil {
		return nil, nil, aerr
	}
	if len(es) == 0 {
		return nil, nil, errf(codeEmptyBatchRequest, "there should be at least one entry in the request (Entries), got none")
	}
	if len(es) > maxBatchEntries {
		return nil, nil, errf(codeTooManyEntries, "maximum number of entries per request are %d, got %d (Entries)", maxBatchEntries, len(es))
	}
	ids := make([]string, len(es))
	seen := map[string]bool{}
	for i, e := range es {
		id, aerr := e.str("Id")
		if aerr != nil {
			return nil, nil, aerr
		}
		if !batchIDRe.MatchString(id) {
			return nil, nil, errf(codeInvalidBatchEntryID, "Entries.%d.Id %q: a batch entry id is 1 to 80 characters of A-Z, a-z, 0-9, - and _", i+1, id)
		}
		if seen[id] {
			return nil, nil, errf(codeBatchEntryIdsNotDistinct, "Entries.%d.Id %q: two entries have the same id", i+1, id)
		}
		seen[id] = true
		ids[i] = id
	}
	return es, ids, nil
}

// failedEntry is one entry of a batch answer's Failed.
func failedEntry(id string, e *apiError) obj {
	return obj{{"Id", id}, {"SenderFault", !e.code.server}, {"Code", e.code.query}, {"Message", e.msg}}
}

// batchResult is a batch answer.
func batchResult(op string, ok, failed []any) obj {
	return obj{{"Successful", list{item: op + "ResultEntry", items: ok}}, {"Failed", list{item: "BatchResultErrorEntry", items: failed}}}
}

func (s *Server) sendMessageBatch(ctx context.Context, c *call) (obj, *apiError) {
	t, es, ids, aerr := s.batchOf(c)
	if aerr != nil {
		return nil, aerr
	}
	var ok, failed []any
	// Entries that pass their checks are sent together, one SendBatch per
	// delay (each all or none), in the order given.
	byDelay := map[int][]sendEntry{}
	var delays []int
	for i, p := range es {
		e, aerr := checkSend(p, fmt.Sprintf("Entries.%d.", i+1))
		if aerr != nil {
			failed = append(failed, failedEntry(ids[i], aerr))
			continue
		}
		e.id = ids[i]
		e.delay = delayOf(p, t, e.delay)
		if _, seen := byDelay[e.delay]; !seen {
			delays = append(delays, e.delay)
		}
		byDelay[e.delay] = append(byDelay[e.delay], e)
	}
	for _, d := range delays {
		group := byDelay[d]
		ps := make([]queue.Payload, len(group))
		as := make([]queue.Attributes, len(group))
		anyAttrs := false
		for i, e := range group {
			ps[i], as[i] = queue.Text(e.body), e.attrs
			anyAttrs = anyAttrs || e.attrs != nil
		}
		var r queue.SendResult
		opts := []queue.SendOption{queue.WithDelay(time.Duration(d) * time.Second), queue.WithSendResult(&r)}
		if anyAttrs {
			opts = append(opts, queue.WithAttributes(as...))
		}
		err := t.q.SendBatch(ctx, ps, opts...)
		for i, e := range group {
			if err != nil {
				failed = append(failed, failedEntry(e.id, queueFailed("SendMessageBatch", err)))
				continue
			}
			ok = append(ok, append(obj{{"Id", e.id}}, e.sendAnswer(sentID(t.q, r.IDs[i]))...))
		}
	}
	return batchResult("SendMessageBatch", ok, failed), nil
}

// receiveAttrs are the message system attributes ReceiveMessage can return.
var receiveAttrs = []string{"ApproximateReceiveCount", "SentTimestamp", "SenderId", traceHeader}

func (s *Server) receiveMessage(ctx context.Context, c *call) (obj, *apiError) {
	t, aerr := s.queueOf(c)
	if aerr != nil {
		return nil, aerr
	}
	max, aerr := c.p.num("MaxNumberOfMessages", 1, queue.MaxReceiveBatch, 1)
	if aerr != nil {
		return nil, aerr
	}
	visSecs, aerr := c.p.num("VisibilityTimeout", 0, maxVisibilitySecs, -1)
	if aerr != nil {
		return nil, aerr
	}
	wait, aerr := c.p.num("WaitTimeSeconds", 0, maxWaitSeconds, t.b.SQS.WaitTimeSeconds)
	if aerr != nil {
		return nil, aerr
	}
	if _, aerr := c.p.str("ReceiveRequestAttemptId"); aerr != nil {
		return nil, aerr
	}
	var names []string
	for _, f := range []string{"AttributeNames", "MessageSystemAttributeNames"} {
		ns, aerr := c.p.strs(f)
		if aerr != nil {
			return nil, aerr
		}
		names = append(names, ns...)
	}
	msgNames, aerr := c.p.strs("MessageAttributeNames")
	if aerr != nil {
		return nil, aerr
	}
	wantMsg := wantedOf(msgNames)
	want := map[string]bool{}
	for _, n := range names {
		for _, a := range receiveAttrs {
			if n == "All" || n == a {
				want[a] = true
			}
		}
	}
	vis := visibilityOf(t.b)
	switch {
	case visSecs == 0:
		vis = queue.MinVisibility // SQS's 0: visible again at once
	case visSecs > 0:
		vis = time.Duration(visSecs) * time.Second
	}
	msgs, err := s.receive(ctx, t, max, vis, time.Duration(wait)*time.Second)
	if err != nil {
		return nil, queueFailed("ReceiveMessage", err)
	}
	out := list{item: "Message"}
	for _, m := range msgs {
		e := obj{{"MessageId", receivedID(t.q, m.ID)}, {"ReceiptHandle", m.ReceiptHandle},
			{"MD5OfBody", md5Hex(m.Payload.Data)}, {"Body", m.Payload.Data}}
		attrs := map[string]any{}
		if want["ApproximateReceiveCount"] {
			attrs["ApproximateReceiveCount"] = strconv.Itoa(m.Attempt)
		}
		if want["SentTimestamp"] {
			attrs["SentTimestamp"] = strconv.FormatInt(m.EnqueuedAt.UnixMilli(), 10)
		}
		if want["SenderId"] {
			attrs["SenderId"] = AccountID
		}
		msgAttrs, sysAttrs := split(m.Attributes)
		if v, ok := sysAttrs[traceHeader]; ok && want[traceHeader] {
			attrs[traceHeader] = v.String
		}
		if len(attrs) > 0 {
			e = append(e, field{"Attributes", newPairs("Attribute", "Name", "Value", attrs)})
		}
		if picked := wantMsg.pick(msgAttrs); len(picked) > 0 {
			vals := make(map[string]any, len(picked))
			for n, v := range picked {
				vals[n] = attrValue(v)
			}
			e = append(e, field{"MD5OfMessageAttributes", md5OfAttrs(picked)},
				field{"MessageAttributes", newPairs("MessageAttribute", "Name", "Value", vals)})
		}
		out.items = append(out.items, e)
	}
	if len(out.items) == 0 {
		return obj{}, nil
	}
	return obj{{"Messages", out}}, nil
}

// receive claims up to max messages, waiting up to wait for one: the
// queue's ReceiveWait, looked at again at once when a hint for the
// binding arrives (a send by another process). A wait cut short by Close
// returns what it has: nothing.
func (s *Server) receive(ctx context.Context, t *target, max int, vis, wait time.Duration) ([]queue.Message, error) {
	end := time.Now().Add(wait)
	for {
		hint := s.wake.chanFor(t.b.Name)
		wctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(s.ctx, cancel)
		go func() {
			select {
			case <-hint:
				cancel()
			case <-wctx.Done():
			}
		}()
		left := max0(time.Until(end))
		msgs, err := t.q.ReceiveWait(wctx, max, left, queue.ReceiveVisibility(vis))
		stop()
		cancel()
		switch {
		case err == nil && (len(msgs) > 0 || time.Until(end) <= 0):
			return msgs, nil
		case err == nil:
			continue // the engine's wait ended early: look again
		case ctx.Err() != nil:
			return nil, err
		case s.ctx.Err() != nil:
			return nil, nil
		case errors.Is(err, context.Canceled):
			continue // a hint: look again
		default:
			return nil, err
		}
	}
}

func max0(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d
}

// receiptProblem says what is wrong with a receipt for t: nil when it is
// one t's queue could have issued.
func receiptProblem(t *target, field, r string) *apiError {
	if r == "" {
		return errf(codeMissingParameter, "the request must contain the parameter %s", field)
	}
	tools, err := engine.For(t.b)
	if err != nil {
		return errf(codeInternalFailure, "%v", err)
	}
	if err := tools.ValidReceipt(t.b, r); err != nil {
		return errf(codeReceiptHandleIsInvalid, "the input receipt handle %q (%s) is not a valid receipt handle of queue %s: %v", r, field, t.name, err)
	}
	return nil
}

// stale is the answer to a receipt whose message was received again since.
func stale(field, r string) *apiError {
	return errf(codeInvalidParameterValue, "value %s for parameter %s is invalid. Reason: The receipt handle has expired: "+
		"the message was received again since, under a newer receipt; nothing was changed", r, field)
}

func (s *Server) deleteMessage(ctx context.Context, c *call) (obj, *apiError) {
	t, aerr := s.queueOf(c)
	if aerr != nil {
		return nil, aerr
	}
	r, aerr := c.p.str("ReceiptHandle")
	if aerr != nil {
		return nil, aerr
	}
	if aerr := receiptProblem(t, "ReceiptHandle", r); aerr != nil {
		return nil, aerr
	}
	if err := t.q.Ack(ctx, r); err != nil {
		if errors.Is(err, queue.ErrStaleReceipt) {
			return nil, stale("ReceiptHandle", r)
		}
		return nil, queueFailed("DeleteMessage", err)
	}
	return nil, nil
}

func (s *Server) deleteMessageBatch(ctx context.Context, c *call) (obj, *apiError) {
	t, es, ids, aerr := s.batchOf(c)
	if aerr != nil {
		return nil, aerr
	}
	var ok, failed []any
	var receipts, rids []string
	for i, e := range es {
		r, aerr := e.str("ReceiptHandle")
		if aerr == nil {
			aerr = receiptProblem(t, fmt.Sprintf("Entries.%d.ReceiptHandle", i+1), r)
		}
		if aerr != nil {
			failed = append(failed, failedEntry(ids[i], aerr))
			continue
		}
		receipts, rids = append(receipts, r), append(rids, ids[i])
	}
	if len(receipts) > 0 {
		outcomes, err := t.q.AckBatch(ctx, receipts)
		for i, id := range rids {
			switch {
			case err != nil:
				failed = append(failed, failedEntry(id, queueFailed("DeleteMessageBatch", err)))
			case outcomes[i] == queue.AckStale:
				failed = append(failed, failedEntry(id, stale(fmt.Sprintf("Entries.%d.ReceiptHandle", i+1), receipts[i])))
			default:
				ok = append(ok, obj{{"Id", id}})
			}
		}
	}
	return batchResult("DeleteMessageBatch", ok, failed), nil
}

// changeVisibility is one ChangeMessageVisibility: 0 makes the message due
// again at once (a nack), anything else moves its lease end.
func changeVisibility(ctx context.Context, t *target, field, r string, secs int) *apiError {
	if aerr := receiptProblem(t, field, r); aerr != nil {
		return aerr
	}
	var err error
	if secs == 0 {
		err = t.q.Nack(ctx, r)
	} else {
		err = t.q.Extend(ctx, r, time.Duration(secs)*time.Second)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, queue.ErrStaleReceipt):
		return stale(field, r)
	case errors.Is(err, queue.ErrMessageGone):
		return errf(codeMessageNotInflight, "%s %s: the message is gone (deleted, purged or moved to its dead-letter queue)", field, r)
	}
	return queueFailed("ChangeMessageVisibility", err)
}

func (s *Server) changeMessageVisibility(ctx context.Context, c *call) (obj, *apiError) {
	t, aerr := s.queueOf(c)
	if aerr != nil {
		return nil, aerr
	}
	r, aerr := c.p.str("ReceiptHandle")
	if aerr != nil {
		return nil, aerr
	}
	if !c.p.given("VisibilityTimeout") {
		return nil, errf(codeMissingParameter, "the request must contain the parameter VisibilityTimeout")
	}
	secs, aerr := c.p.num("VisibilityTimeout", 0, maxVisibilitySecs, 0)
	if aerr != nil {
		return nil, aerr
	}
	return nil, changeVisibility(ctx, t, "ReceiptHandle", r, secs)
}

func (s *Server) changeMessageVisibilityBatch(ctx context.Context, c *call) (obj, *apiError) {
	t, es, ids, aerr := s.batchOf(c)
	if aerr != nil {
		return nil, aerr
	}
	var ok, failed []any
	for i, e := range es {
		pfx := fmt.Sprintf("Entries.%d.", i+1)
		r, aerr := e.str("ReceiptHandle")
		if aerr == nil && !e.given("VisibilityTimeout") {
			aerr = errf(codeMissingParameter, "the request must contain the parameter %sVisibilityTimeout", pfx)
		}
		secs := 0
		if aerr == nil {
			secs, aerr = e.num("VisibilityTimeout", 0, maxVisibilitySecs, 0)
		}
		if aerr == nil {
			aerr = changeVisibility(ctx, t, pfx+"ReceiptHandle", r, secs)
		}
		if aerr != nil {
			failed = append(failed, failedEntry(ids[i], aerr))
			continue
		}
		ok = append(ok, obj{{"Id", ids[i]}})
	}
	return batchResult("ChangeMessageVisibilityBatch", ok, failed), nil
}
