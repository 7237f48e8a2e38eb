package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
)

// queueCommand works with a queue binding's store.
type queueCommand struct {
	app *app
	now func() time.Time // time.Now; tests replace it
}

func (c *queueCommand) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

func (c *queueCommand) Run(ctx context.Context, args []string) error {
	return subcommands(ctx, "queue", map[string]func(context.Context, []string) error{
		"send":    c.send,
		"receive": c.receive,
		"ack":     c.ack,
		"nack":    c.nack,
		"purge":   c.purge,
		"peek":    c.peek,
		"stats":   c.stats,
		"extend":  c.extend,
		"redrive": c.redrive,
		"tail":    c.tail,
	}, args)
}

// The --json outputs of queue (docs/CLI.md).
type (
	queueSendJSON struct {
		Binding string `json:"binding"`
		Type    string `json:"type"`
		Bytes   int    `json:"bytes"`
		// DelayMillis is --delay; 0 without.
		DelayMillis int64 `json:"delayMillis,omitempty"`
		// DedupKey is --dedup-key ("" without); Duplicate reports that a
		// send with that key within the binding's dedupWindow stored the
		// message already, so nothing was added.
		DedupKey  string `json:"dedupKey,omitempty"`
		Duplicate bool   `json:"duplicate"`
	}
	queueReceiveJSON struct {
		Binding  string            `json:"binding"`
		Messages []queueMessageOut `json:"messages"`
	}
	queueMessageOut struct {
		ID      int64           `json:"id"`
		Receipt string          `json:"receipt"`
		Attempt int             `json:"attempt"`
		Type    string          `json:"type"`
		Payload string          `json:"payload"`
		JSON    json.RawMessage `json:"json,omitempty"`
		// PayloadBase64 is the payload's bytes when they are not UTF-8
		// (another program's BLOB): payload then shows them with U+FFFD.
		PayloadBase64 string `json:"payloadBase64,omitempty"`
		EnqueuedAt    string `json:"enqueuedAt"`
	}
	queueReceiptJSON struct {
		Binding string              `json:"binding"`
		Results []queueReceiptState `json:"results"`
	}
	queueReceiptState struct {
		Receipt string `json:"receipt"`
		OK      bool   `json:"ok"`
		// Error says why nothing was done for this receipt.
		Error string `json:"error,omitempty"`
		// Gone: ack found the message already gone (acked before, purged,
		// moved); nothing was done and the ack still succeeds (OK, exit 0).
		Gone bool `json:"gone,omitempty"`
	}
	queuePurgeJSON struct {
		Binding        string `json:"binding"`
		Purged         bool   `json:"purged"`
		MessagesBefore int64  `json:"messagesBefore"`
	}
	queuePeekJSON struct {
		Binding  string         `json:"binding"`
		Messages []queuePeekOut `json:"messages"`
	}
	queuePeekOut struct {
		ID            int64           `json:"id"`
		Attempt       int             `json:"attempt"`
		Type          string          `json:"type"`
		Payload       string          `json:"payload"`
		JSON          json.RawMessage `json:"json,omitempty"`
		Bytes         int             `json:"bytes"`
		PayloadBase64 string          `json:"payloadBase64,omitempty"`
		EnqueuedAt    string          `json:"enqueuedAt"`
		VisibleAt     string          `json:"visibleAt"`
		State         string          `json:"state"`
		// Odd says what is odd about a row another program wrote.
		Odd []string `json:"odd,omitempty"`
		// Origin is where a dead letter came from (absent otherwise).
		Origin *queueOriginOut `json:"origin,omitempty"`
		// LastError is the error of the message's last failed delivery in
		// Consume, carried into its dead-letter queue; null if none.
		LastError *string `json:"lastError"`
		// Attributes are the message's attributes (queue.WithAttributes,
		// SQS message and system attributes); absent if none.
		Attributes queue.Attributes `json:"attributes,omitempty"`
	}
	queueOriginOut struct {
		Binding     string `json:"binding"`
		Store       string `json:"store"`
		ID          int64  `json:"id"`
		Attempts    int    `json:"attempts"`
		EnqueuedAt  string `json:"enqueuedAt"`
		MovedAt     string `json:"movedAt"`
		LastReceipt string `json:"lastReceipt,omitempty"`
		Reason      string `json:"reason,omitempty"`
	}
	queueExtendJSON struct {
		Binding      string `json:"binding"`
		Receipt      string `json:"receipt"`
		VisibleUntil string `json:"visibleUntil"`
	}
	queueRedriveJSON struct {
		Binding string `json:"binding"`
		// To is the --to binding; "" when every message went to its origin.
		To      string `json:"to,omitempty"`
		Moved   int    `json:"moved"`
		Skipped int    `json:"skipped"`
	}
	queueStatsJSON struct {
		Binding          string `json:"binding"`
		Due              int64  `json:"due"`
		InFlight         int64  `json:"inFlight"`
		Delayed          int64  `json:"delayed"`
		Total            int64  `json:"total"`
		OldestAgeMillis  int64  `json:"oldestAgeMillis"`
		OldestEnqueuedAt string `json:"oldestEnqueuedAt,omitempty"`
		// DeadLetters counts messages moved here from a queue whose
		// maxAttempts they used up, split by origin; Moving counts messages
		// on their way out of this queue (to its dead-letter queue).
		DeadLetters int64            `json:"deadLetters"`
		Origins     []queueOriginCnt `json:"origins"`
		Moving      int64            `json:"moving"`
	}
	queueOriginCnt struct {
		Binding string `json:"binding"`
		Store   string `json:"store"`
		Count   int64  `json:"count"`
	}
)

// Message states shown by peek.
const (
	stateDue      = "due"
	stateInFlight = "in-flight"
	stateDelayed  = "delayed"
	stateMoving   = "moving"
	// stateNeverDue: visible_at is no number (written by another
	// program), which SQLite compares above every number.
	stateNeverDue = "never-due"
)

func queueFlags(sub string) (fs *flag.FlagSet, file *string, asJSON *bool) {
	fs = newFlagSet("queue " + sub)
	return fs, stackFlag(fs), jsonFlag(fs)
}

// openBinding resolves and opens the queue binding named by pos[0].
// close closes the queue (and a jetstream binding's connection).
func (c *queueCommand) openBinding(ctx context.Context, file, name string, access engine.Access) (q *queue.Queue, close func(), b config.Binding, err error) {
	st, b, err := c.app.findBinding(file, name, config.TypeQueue)
	if err != nil {
		return nil, nil, b, err
	}
	q, close, err = openQueue(ctx, st, b, access)
	return q, close, b, err
}

func (c *queueCommand) send(ctx context.Context, args []string) error {
	fs, file, asJSON := queueFlags("send")
	isJSON := fs.Bool("json-payload", false, "the payload is JSON (checked, stored compacted) instead of text")
	fs.BoolVar(isJSON, "J", false, "the same as --json-payload")
	delay := fs.Duration("delay", 0, "make the message due `D` from now (0-12h)")
	dedupKey := fs.String("dedup-key", "", "send idempotently: with `K` sent within the binding's dedupWindow, add nothing (A-Z a-z 0-9 - _ : ., 1-512 bytes)")
	pos, err := parseWantArgs(fs, args, 2, 2, "BINDING TEXT (or - to read the payload from stdin)")
	if err != nil {
		return err
	}
	data, err := c.app.readInput(pos[1], "payload", queue.MaxPayloadBytes)
	if err != nil {
		return err
	}
	p := queue.Text(string(data))
	if *isJSON {
		if !json.Valid(data) {
			return &usageError{msg: "--json-payload: the payload is not valid JSON", try: `localcloud queue send BINDING '{"order":42}' --json-payload`}
		}
		p = queue.JSON(json.RawMessage(data))
	} else if looksLikeJSONDocument(data) {
		fmt.Fprintln(c.app.stderr, "note: the payload is a JSON object or array but is sent as text; add --json-payload (-J) to send a JSON message")
	}
	q, closeQueue, b, err := c.openBinding(ctx, *file, pos[0], engine.Create)
	if err != nil {
		return err
	}
	defer closeQueue()
	var res queue.SendResult
	sopts := []queue.SendOption{queue.WithDelay(*delay), queue.WithSendResult(&res)}
	if *dedupKey != "" {
		sopts = append(sopts, queue.WithDedupKey(*dedupKey))
	}
	if err := q.Send(ctx, p, sopts...); err != nil {
		return storeErr("queue send", err)
	}
	dup := len(res.Duplicate) == 1 && res.Duplicate[0]
	if *asJSON {
		return c.app.printJSON(queueSendJSON{Binding: b.Name, Type: string(p.Type), Bytes: len(p.Data), DelayMillis: delay.Milliseconds(),
			DedupKey: *dedupKey, Duplicate: dup})
	}
	if dup {
		fmt.Fprintf(c.app.stdout, "not sent to %s: dedup key %q was sent within the binding's dedupWindow; nothing added\n", b.Name, *dedupKey)
		return nil
	}
	due := ""
	if *delay > 0 {
		due = ", due in " + delay.String()
	}
	fmt.Fprintf(c.app.stderr, "sent a %s message to %s (%s%s)\n", p.Type, b.Name, quantity(len(p.Data), "byte"), due)
	return nil
}

// looksLikeJSONDocument reports whether data is a JSON object or array: a
// payload a user most likely meant to send with --json-payload.
func looksLikeJSONDocument(data []byte) bool {
	t := bytes.TrimSpace(data)
	return len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(t)
}

func (c *queueCommand) receive(ctx context.Context, args []string) error {
	fs, file, asJSON := queueFlags("receive")
	max := fs.Int("max", 1, fmt.Sprintf("claim at most `N` messages (1-%d)", queue.MaxReceiveBatch))
	vis := fs.Duration("visibility", 0, "hide the claimed messages for `D` (default: the binding's visibilityTimeout)")
	wait := fs.Duration("wait", 0, "when nothing is due, wait up to `D` for a message")
	pos, err := parseWantArgs(fs, args, 1, 1, "BINDING")
	if err != nil {
		return err
	}
	if *wait < 0 {
		return &usageError{msg: fmt.Sprintf("--wait must not be negative, got %s", *wait), try: "localcloud queue receive BINDING --wait 10s"}
	}
	visSet := false
	fs.Visit(func(f *flag.Flag) { visSet = visSet || f.Name == "visibility" })
	if visSet && (*vis < time.Millisecond || *vis > queue.MaxVisibility) {
		return &usageError{
			msg: fmt.Sprintf("--visibility must be between 1ms and %s, got %s", queue.MaxVisibility, *vis),
			try: "leave --visibility out for the binding's visibilityTimeout, or give e.g. --visibility 30s",
		}
	}
	q, closeQueue, b, err := c.openBinding(ctx, *file, pos[0], engine.Write)
	if err != nil {
		return err
	}
	defer closeQueue()
	var opts []queue.ReceiveOption
	if visSet {
		opts = append(opts, queue.ReceiveVisibility(*vis))
	}
	ctx, stop := c.app.interruptible(ctx)
	defer stop()
	// On SIGINT during the wait, ReceiveWait returns having claimed nothing.
	msgs, err := q.ReceiveWait(ctx, *max, *wait, opts...)
	if errors.Is(err, context.Canceled) {
		return &exitCodeError{code: 130}
	}
	if err != nil {
		return storeErr("queue receive", err)
	}
	if *asJSON {
		out := queueReceiveJSON{Binding: b.Name, Messages: []queueMessageOut{}}
		for _, m := range msgs {
			// Every claimed message is printed: a payload another program
			// wrote that is not JSON although typed json gets no json
			// field (it would make the whole output unprintable), one that
			// is not UTF-8 its bytes in base64.
			mo := queueMessageOut{ID: m.ID, Receipt: m.ReceiptHandle, Attempt: m.Attempt, Type: string(m.Payload.Type),
				Payload: m.Payload.Data, PayloadBase64: base64IfBinary(m.Payload.Data), EnqueuedAt: fmtTime(m.EnqueuedAt)}
			if m.Payload.Type == queue.TypeJSON && json.Valid([]byte(m.Payload.Data)) {
				mo.JSON = json.RawMessage(m.Payload.Data)
			}
			out.Messages = append(out.Messages, mo)
		}
		return c.app.printJSON(out)
	}
	if len(msgs) == 0 {
		fmt.Fprintf(c.app.stderr, "no message due in %s\n", b.Name)
		return nil
	}
	for i, m := range msgs {
		if i > 0 {
			fmt.Fprintln(c.app.stdout)
		}
		fmt.Fprintf(c.app.stdout, "id=%d attempt=%d type=%s enqueued=%s receipt=%s\n%s\n",
			m.ID, m.Attempt, m.Payload.Type, fmtTime(m.EnqueuedAt), m.ReceiptHandle, m.Payload.Data)
	}
	return nil
}

func (c *queueCommand) ack(ctx context.Context, args []string) error {
	return c.settle(ctx, "ack", args)
}

func (c *queueCommand) nack(ctx context.Context, args []string) error {
	return c.settle(ctx, "nack", args)
}

// settle acks or nacks every receipt given, and fails if any failed. A
// string that is not a receipt the engine issues (engine.Tools.ValidReceipt) would
// be a no-op success in the library; here it is a failure that says nothing
// was done, so no ack or nack is reported that did not happen.
func (c *queueCommand) settle(ctx context.Context, op string, args []string) error {
	fs, file, asJSON := queueFlags(op)
	delay := new(time.Duration)
	if op == "nack" {
		delay = fs.Duration("delay", 0, "make the messages due `D` from now instead of at once (0-12h)")
	}
	pos, err := parseWantArgs(fs, args, 2, -1, "BINDING RECEIPT...")
	if err != nil {
		return err
	}
	if *delay < 0 || *delay > queue.MaxDelay {
		return &usageError{msg: fmt.Sprintf("--delay must be between 0s and %s, got %s", queue.MaxDelay, *delay), try: "localcloud queue nack BINDING RECEIPT --delay 30s"}
	}
	q, closeQueue, b, err := c.openBinding(ctx, *file, pos[0], engine.Write)
	if err != nil {
		return err
	}
	defer closeQueue()
	t, err := toolsOf(b)
	if err != nil {
		return err
	}
	out := queueReceiptJSON{Binding: b.Name}
	var failed []string
	for _, r := range pos[1:] {
		res := queueReceiptState{Receipt: r, OK: true}
		if err := t.ValidReceipt(b, r); err != nil {
			res.OK, res.Error = false, fmt.Sprintf("%v; nothing %sed", err, op)
			failed = append(failed, fmt.Sprintf("%s %s: %s", op, r, res.Error))
			out.Results = append(out.Results, res)
			continue
		}
		if op == "ack" {
			var outcome []queue.AckOutcome
			outcome, err = q.AckBatch(ctx, []string{r})
			switch {
			case err != nil:
			case outcome[0] == queue.AckGone:
				res.Gone = true
			case outcome[0] == queue.AckStale:
				// Nothing was deleted; Ack of a stale receipt changes
				// nothing either and returns the library's error for it.
				err = q.Ack(ctx, r)
				if err == nil {
					err = queue.ErrStaleReceipt
				}
			}
		} else {
			err = q.Nack(ctx, r, queue.WithDelay(*delay))
		}
		if err != nil {
			res.OK, res.Error = false, err.Error()
			failed = append(failed, fmt.Sprintf("%s %s: %v", op, r, err))
		}
		out.Results = append(out.Results, res)
	}
	if *asJSON {
		if err := c.app.printJSON(out); err != nil {
			return err
		}
	} else {
		for _, r := range out.Results {
			switch {
			case r.Gone:
				fmt.Fprintf(c.app.stderr, "already gone %s: its message was acked, purged or moved before; nothing done\n", r.Receipt)
			case r.OK:
				fmt.Fprintf(c.app.stderr, "%sed %s\n", op, r.Receipt)
			}
		}
	}
	if len(failed) > 0 {
		return &hintError{
			err: errors.New(strings.Join(failed, "\n")),
			try: "use the receipt exactly as queue receive printed it, of the message's latest delivery (a stale receipt means it was delivered again since)",
		}
	}
	return nil
}

func (c *queueCommand) purge(ctx context.Context, args []string) error {
	fs, file, asJSON := queueFlags("purge")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	pos, err := parseWantArgs(fs, args, 1, 1, "BINDING")
	if err != nil {
		return err
	}
	q, closeQueue, b, err := c.openBinding(ctx, *file, pos[0], engine.Write)
	if err != nil {
		return err
	}
	defer closeQueue()
	before, err := q.Stats(ctx)
	if err != nil {
		return err
	}
	if before.Total == 0 {
		if *asJSON {
			return c.app.printJSON(queuePurgeJSON{Binding: b.Name, Purged: false, MessagesBefore: 0})
		}
		fmt.Fprintf(c.app.stderr, "queue %s is empty; nothing to purge\n", b.Name)
		return nil
	}
	if !*yes {
		fmt.Fprintf(c.app.stderr, "Delete all %s of queue %s (%d due, %d in flight, %d delayed)? Type yes to confirm: ",
			quantity(before.Total, "message"), b.Name, before.Due, before.Leased(), before.Delayed)
		answer := ""
		if c.app.stdin != nil {
			line, _ := bufio.NewReader(c.app.stdin).ReadString('\n')
			answer = strings.ToLower(strings.TrimSpace(line))
		}
		if !isTerminal(c.app.stdin) {
			fmt.Fprintln(c.app.stderr) // a terminal echoed the user's Enter
		}
		if answer != "yes" && answer != "y" {
			return &hintError{err: fmt.Errorf("purge of %s not confirmed; nothing was deleted", b.Name), try: "localcloud queue purge " + b.Name + " --yes"}
		}
	}
	if err := q.Purge(ctx); err != nil {
		return err
	}
	if *asJSON {
		return c.app.printJSON(queuePurgeJSON{Binding: b.Name, Purged: true, MessagesBefore: before.Total})
	}
	fmt.Fprintf(c.app.stderr, "purged %s (it held %s)\n", b.Name, quantity(before.Total, "message"))
	return nil
}

func (c *queueCommand) extend(ctx context.Context, args []string) error {
	fs, file, asJSON := queueFlags("extend")
	pos, err := parseWantArgs(fs, args, 3, 3, "BINDING RECEIPT DURATION")
	if err != nil {
		return err
	}
	d, err := time.ParseDuration(pos[2])
	if err != nil {
		return &usageError{msg: fmt.Sprintf("DURATION: %q is not a duration like 30s or 5m", pos[2]), try: "localcloud queue extend BINDING RECEIPT 5m"}
	}
	q, closeQueue, b, err := c.openBinding(ctx, *file, pos[0], engine.Write)
	if err != nil {
		return err
	}
	defer closeQueue()
	until := c.clock().Add(d)
	if err := q.Extend(ctx, pos[1], d); err != nil {
		if errors.Is(err, queue.ErrStaleReceipt) {
			return &hintError{err: err, try: "the message was delivered again since; use the receipt of its latest delivery"}
		}
		return storeErr("queue extend", err)
	}
	if *asJSON {
		return c.app.printJSON(queueExtendJSON{Binding: b.Name, Receipt: pos[1], VisibleUntil: fmtTime(until)})
	}
	fmt.Fprintf(c.app.stderr, "extended %s: hidden until %s\n", pos[1], fmtTime(until))
	return nil
}

func (c *queueCommand) redrive(ctx context.Context, args []string) error {
	fs, file, asJSON := queueFlags("redrive")
	to := fs.String("to", "", "move the messages to queue `BINDING` instead of the queue each came from")
	max := fs.Int("max", 0, "move at most `N` messages (default: all)")
	pos, err := parseWantArgs(fs, args, 1, 1, "DLQ")
	if err != nil {
		return err
	}
	if *max < 0 {
		return &usageError{msg: fmt.Sprintf("--max must be at least 1, got %d", *max), try: "localcloud queue redrive DLQ --max 10"}
	}
	st, b, err := c.app.findBinding(*file, pos[0], config.TypeQueue)
	if err != nil {
		return err
	}
	if *to == "" {
		var sources []string
		for _, o := range st.Bindings {
			if o.DeadLetter == b.Name && o.MaxAttempts > 0 {
				sources = append(sources, o.Name)
			}
		}
		if len(sources) == 0 {
			return &hintError{
				err: fmt.Errorf("queue %s is no binding's dead-letter queue in %s (no binding has deadLetter: %s); nothing to redrive", b.Name, st.File, b.Name),
				try: fmt.Sprintf("move its messages to another queue with localcloud queue redrive %s --to BINDING", b.Name),
			}
		}
	}
	var opts []queue.RedriveOption
	if *max > 0 {
		opts = append(opts, queue.RedriveMax(*max))
	}
	if *to != "" {
		_, tb, err := c.app.findBinding(*file, *to, config.TypeQueue)
		if err != nil {
			return err
		}
		if tb.Name == b.Name {
			return &usageError{msg: "--to must name another queue binding than the dead-letter queue " + b.Name, try: "localcloud queue redrive " + b.Name}
		}
		if tb.Engine != b.Engine {
			return &usageError{
				msg: fmt.Sprintf("--to %s: queue %s uses engine %s and %s uses engine %s; redrive moves messages between queues of one engine",
					tb.Name, tb.Name, tb.Engine, b.Name, b.Engine),
				try: "localcloud queue redrive " + b.Name + " --to BINDING, naming a queue on engine " + b.Engine,
			}
		}
		opts = append(opts, queue.RedriveTo(engine.Location(tb)))
	}
	q, closeQueue, err := openQueue(ctx, st, b, engine.Write)
	if err != nil {
		return err
	}
	defer closeQueue()
	res, err := q.Redrive(ctx, opts...)
	if err != nil {
		return storeErr("queue redrive", err)
	}
	if *asJSON {
		return c.app.printJSON(queueRedriveJSON{Binding: b.Name, To: *to, Moved: res.Moved, Skipped: res.Skipped})
	}
	where := "their origin queues"
	if *to != "" {
		where = *to
	}
	fmt.Fprintf(c.app.stderr, "redrove %s from %s to %s\n", quantity(res.Moved, "message"), b.Name, where)
	if res.Skipped > 0 {
		fmt.Fprintf(c.app.stderr, "%s of %s have no recorded origin and stayed; move them with --to BINDING\n", quantity(res.Skipped, "message"), b.Name)
	}
	return nil
}

func (c *queueCommand) Usage() {
	fmt.Fprint(c.app.stdout, queueUsage)
}

func (c *queueCommand) subUsage(fs *flag.FlagSet) bool {
	return printSubUsage(c.app.stdout, queueUsage, queueSubcommands, fs)
}

// queueUsage is the help of queue and all its subcommands; "queue SUB -h" prints
// SUB's part of it (printSubUsage).
const queueUsage = `Send, receive and inspect the messages of a queue binding.

Usage:
  localcloud queue send    BINDING TEXT|-      [-J|--json-payload] [--delay D] [--json]
  localcloud queue receive BINDING             [--max N] [--visibility D] [--wait D] [--json]
  localcloud queue ack     BINDING RECEIPT...  [--json]
  localcloud queue nack    BINDING RECEIPT...  [--delay D] [--json]
  localcloud queue extend  BINDING RECEIPT D   [--json]
  localcloud queue purge   BINDING             [--yes] [--json]
  localcloud queue peek    BINDING             [--limit N] [--json]
  localcloud queue stats   BINDING             [--json]
  localcloud queue redrive DLQ                 [--to BINDING] [--max N] [--json]
  localcloud queue tail    BINDING             [--existing] [--max N] [--json]

Every subcommand also takes -f FILE (default $LOCALCLOUD_STACK, else
./stack.yaml); flags may come before or after the arguments, and "--" ends
the flags.

  send     enqueues TEXT, or stdin when TEXT is "-" (at most 65536 bytes), as
           a text message; with --json-payload (-J) as a JSON message
           (checked). A text payload that is a JSON object or array gets a
           note on stderr naming --json-payload (--json is the output flag).
           --delay D makes it due D from now (0-12h).
  receive  claims up to --max due messages (default 1) and prints each as a
           line "id=ID attempt=N type=T enqueued=TIME receipt=RECEIPT"
           followed by its payload. The messages stay hidden for
           --visibility (default: the binding's visibilityTimeout); ack
           them with their receipt or they are delivered again. --wait D
           waits up to D for a message when none is due (Ctrl-C stops the
           wait without claiming anything).
  ack      deletes the messages of the receipts; nack makes them due again,
           at once or with --delay D after a back-off. A stale receipt (the
           message was delivered again since) fails, and so does a string
           that is not a receipt the store issues (an upper-case UUID,
           a typo): nothing is done for it, it is reported on stderr and
           the command exits 1; the other receipts given are still settled.
           Acking a receipt whose message is already gone (acked before,
           purged, moved) does nothing, says "already gone RECEIPT" and
           exits 0: the message is gone, as the ack wanted.
  extend   keeps the message of RECEIPT hidden for D from now (1ms-12h), for
           a handler that needs longer than its lease. A stale receipt, or a
           message that is gone, fails.
  purge    deletes every message, due or in flight, after asking (type yes
           on stdin) unless --yes.
  peek     lists up to --limit messages (default 20) in delivery order
           WITHOUT claiming them: id, attempt, enqueued, visible at, state
           (due, in-flight with its lease left, delayed, or moving to the
           dead-letter queue), the origin of a dead letter (binding#id and
           its attempts) and a payload preview. Attempt counts and receipts
           are not changed.
  stats    due, in-flight and total counts, the age of the oldest message,
           and the dead letters by origin and the messages being moved.
  tail     prints each new message as it arrives (woken by up's hints,
           else polling every second), never claiming it: the consumers
           still get every message. --existing prints the ones already there
           first; --max N stops after N; --json prints one JSON object per
           line. A message sent and acked between two reads is not shown.
  redrive  moves the due messages of the dead-letter queue DLQ back to the
           queue each came from (or to --to BINDING), at most --max N; they
           start afresh there (attempt 0). Messages sent to DLQ directly have
           no origin and move only with --to.

peek and stats open the store read-only. While localcloud up runs, send and
nack wake waiting consumers at once through up's hint server.

On a jetstream binding (engine: jetstream) every subcommand works on its
stream LCQ_<binding>, reached like an app's FromEnv: the stack's
jetstream.servers, or the embedded server of the running localcloud up
(which must then run). Ids are stream sequences and receipts start with
js1:; peek shows a delivered message in flight with no visible-at time (the
server holds lease ends). See docs/CLI.md, "Jetstream bindings".

Examples:
  localcloud queue send orders '{"order":42}' --json-payload
  echo hello | localcloud queue send orders -
  localcloud queue receive orders --max 10 --wait 30s --json
  localcloud queue ack orders 17:0b6f4f7e-8d2c-4c39-9d0e-2b9f4c1a7e55
  localcloud queue nack orders 17:0b6f4f7e-8d2c-4c39-9d0e-2b9f4c1a7e55 --delay 30s
  localcloud queue redrive orders-dlq --max 10
  localcloud queue peek orders --limit 5
  localcloud queue purge orders --yes
  localcloud queue tail orders --json

Flags:
  -f, --file FILE  stack file
  --json           print one JSON object instead of text (docs/CLI.md)
  -J, --json-payload
                   send: the payload is JSON
  --delay D        send, nack: due D from now, 0-12h (default 0)
  --to BINDING     redrive: target queue instead of each message's origin
  --max N          receive: at most N messages, 1-10 (default 1);
                   redrive: at most N messages (default all)
  --visibility D   receive: lease length, 1ms-12h
  --wait D         receive: long-poll up to D
  --yes            purge: do not ask
  --limit N        peek: at most N messages, 1-1000 (default 20)
  --existing       tail: print the messages already there first
  --max N          tail: stop after N messages
`
