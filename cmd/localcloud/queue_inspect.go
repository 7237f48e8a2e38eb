package main

// queue peek and stats: the messages and counts of a queue, read without
// claiming anything.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine"
)

func (c *queueCommand) peek(ctx context.Context, args []string) error {
	fs, file, asJSON := queueFlags("peek")
	limit := fs.Int("limit", 20, fmt.Sprintf("list at most `N` messages (1-%d)", queue.MaxPeekLimit))
	pos, err := parseWantArgs(fs, args, 1, 1, "BINDING")
	if err != nil {
		return err
	}
	if *limit < 1 || *limit > queue.MaxPeekLimit {
		return &usageError{msg: fmt.Sprintf("--limit must be between 1 and %d, got %d", queue.MaxPeekLimit, *limit), try: "localcloud queue peek -h"}
	}
	q, closeQueue, b, err := c.openBinding(ctx, *file, pos[0], engine.Read)
	if err != nil {
		return err
	}
	defer closeQueue()
	tools, err := toolsOf(b)
	if err != nil {
		return err
	}
	msgs, err := q.Peek(ctx, *limit)
	if err != nil {
		return err
	}
	now := c.clock()
	if *asJSON {
		out := queuePeekJSON{Binding: b.Name, Messages: []queuePeekOut{}}
		for _, m := range msgs {
			po := queuePeekOut{ID: m.ID, Attempt: m.Attempt, Type: string(m.Payload.Type), Payload: m.Payload.Data,
				Bytes: len(m.Payload.Data), PayloadBase64: base64IfBinary(m.Payload.Data), EnqueuedAt: fmtTime(m.EnqueuedAt),
				VisibleAt: fmtTime(m.VisibleAt), State: peekState(m, now), Odd: m.Odd, Attributes: m.Attributes}
			if leaseUnknown(tools, m) {
				po.VisibleAt, po.State = "", stateInFlight
			}
			if m.Payload.Type == queue.TypeJSON && json.Valid([]byte(m.Payload.Data)) {
				po.JSON = json.RawMessage(m.Payload.Data)
			}
			if o := m.Origin; o != nil {
				po.Origin = &queueOriginOut{Binding: o.Binding, Store: o.Store, ID: o.ID, Attempts: o.Attempts,
					EnqueuedAt: fmtTime(o.EnqueuedAt), MovedAt: fmtTime(o.MovedAt), LastReceipt: o.LastReceipt, Reason: o.Reason}
			}
			if m.LastError != "" {
				po.LastError = &m.LastError
			}
			out.Messages = append(out.Messages, po)
		}
		return c.app.printJSON(out)
	}
	tw := tabwriter.NewWriter(c.app.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tATTEMPT\tENQUEUED\tVISIBLE AT\tSTATE\tORIGIN\tTYPE\tPAYLOAD\tLAST ERROR")
	for _, m := range msgs {
		state, visible := peekState(m, now), fmtTime(m.VisibleAt)
		switch {
		case leaseUnknown(tools, m):
			state, visible = stateInFlight+" (lease end held by the server)", "-"
		case state != stateDue && state != stateMoving && state != stateNeverDue:
			state += " (" + m.VisibleAt.Sub(now).Round(time.Second).String() + " left)"
		}
		lastErr := "-"
		if m.LastError != "" {
			lastErr = preview([]byte(m.LastError))
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Attempt, fmtTime(m.EnqueuedAt), visible,
			state, originText(m.Origin), m.Payload.Type, payloadPreview(m.Payload), lastErr)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range msgs {
		if len(m.Odd) > 0 {
			fmt.Fprintf(c.app.stdout, "message %d was written by another program: %s\n", m.ID, strings.Join(m.Odd, "; "))
		}
		if m.Origin != nil && m.Origin.Reason != "" {
			fmt.Fprintf(c.app.stdout, "message %d was moved here undelivered: %s\n", m.ID, m.Origin.Reason)
		}
	}
	return nil
}

// base64IfBinary returns s in base64 when it is not UTF-8, else "".
func base64IfBinary(s string) string {
	if utf8.ValidString(s) {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(s))
}

// payloadPreview shows a JSON payload as JSON (compact, cut with "..."
// when long) and any other payload quoted, as preview does.
func payloadPreview(p queue.Payload) string {
	if p.Type != queue.TypeJSON || !json.Valid([]byte(p.Data)) {
		return preview([]byte(p.Data))
	}
	var buf bytes.Buffer
	if json.Compact(&buf, []byte(p.Data)) != nil || bytes.ContainsAny(buf.Bytes(), "\t\r\n") {
		return preview([]byte(p.Data))
	}
	b := buf.Bytes()
	if len(b) <= previewBytes {
		return string(b)
	}
	cut := previewBytes
	for cut > previewBytes-utf8.UTFMax && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return string(b[:cut]) + "..."
}

// originText shows where a dead letter came from: "orders#17 (3 attempts)",
// or "-".
func originText(o *queue.Origin) string {
	if o == nil {
		return "-"
	}
	name := o.Binding
	if name == "" {
		name = o.Store
	}
	return fmt.Sprintf("%s#%d (%d attempts)", name, o.ID, o.Attempts)
}

// leaseUnknown reports a delivered message of a queue whose engine keeps
// lease ends to itself (engine.Traits.LeaseEnds; JetStream's server): peek
// shows it in flight with no visibleAt (it is due again when its lease
// runs out or it is nacked).
func leaseUnknown(t engine.Tools, m queue.PeekedMessage) bool {
	return !t.Traits().LeaseEnds && m.Delivered && m.VisibleAt.IsZero()
}

// peekState says whether a message is due, in flight (leased), delayed, or
// being moved to another queue (a dead letter on its way out).
func peekState(m queue.PeekedMessage, now time.Time) string {
	switch {
	case m.Moving:
		return stateMoving
	case m.VisibleAt.IsZero():
		return stateNeverDue
	case !m.VisibleAt.After(now):
		return stateDue
	case m.Attempt > 0:
		return stateInFlight
	}
	return stateDelayed
}

func (c *queueCommand) stats(ctx context.Context, args []string) error {
	fs, file, asJSON := queueFlags("stats")
	pos, err := parseWantArgs(fs, args, 1, 1, "BINDING")
	if err != nil {
		return err
	}
	q, closeQueue, b, err := c.openBinding(ctx, *file, pos[0], engine.Read)
	if err != nil {
		return err
	}
	defer closeQueue()
	s, err := q.Stats(ctx)
	if err != nil {
		return err
	}
	// queue.Stats counts delayed messages in InFlight; the CLI shows them
	// apart (Leased, as status and the explorer do).
	out := queueStatsJSON{Binding: b.Name, Due: s.Due, InFlight: s.Leased(), Delayed: s.Delayed, Total: s.Total,
		DeadLetters: s.DeadLetters, Moving: s.Moving, Origins: []queueOriginCnt{}}
	for _, o := range s.Origins {
		out.Origins = append(out.Origins, queueOriginCnt{Binding: o.Binding, Store: o.Store, Count: o.Count})
	}
	if !s.Oldest.IsZero() {
		out.OldestEnqueuedAt = fmtTime(s.Oldest)
		if age := c.clock().Sub(s.Oldest); age > 0 {
			out.OldestAgeMillis = age.Milliseconds()
		}
	}
	if *asJSON {
		return c.app.printJSON(out)
	}
	tw := tabwriter.NewWriter(c.app.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tDUE\tIN FLIGHT\tDELAYED\tTOTAL\tOLDEST")
	oldest := "-"
	if s.Total > 0 {
		oldest = (time.Duration(out.OldestAgeMillis) * time.Millisecond).Round(time.Second).String()
	}
	fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", b.Name, s.Due, out.InFlight, s.Delayed, s.Total, oldest)
	if err := tw.Flush(); err != nil {
		return err
	}
	if s.Moving > 0 {
		fmt.Fprintf(c.app.stdout, "%s being moved to the dead-letter queue\n", quantity(s.Moving, "message"))
	}
	if s.DeadLetters > 0 {
		fmt.Fprintf(c.app.stdout, "%s:", quantity(s.DeadLetters, "dead letter"))
		for i, o := range s.Origins {
			name := o.Binding
			if name == "" {
				name = o.Store
			}
			sep := ","
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(c.app.stdout, "%s %d from %s", sep, o.Count, name)
		}
		fmt.Fprintln(c.app.stdout)
	}
	return nil
}
