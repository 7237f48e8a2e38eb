package jsengine

// Receipts: the form "js1:<deadline ms>:<lease ms>:<incarnation>:<ack
// subject>" (incarnation.go), what an
// ack subject says about its delivery, and the handle's record of the
// receipts it acked, nacked or extended.

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// receiptPrefix starts every receipt this engine issues.
const receiptPrefix = "js1:"

// receipt is a parsed receipt: "js1:<deadline ms>:<lease ms>:<incarnation>:<ack subject>".
type receipt struct {
	deadline time.Time
	lease    time.Duration
	inc      string // the incarnation it was issued under (incarnation.go)
	reply    string
	seq      uint64
}

// formatReceipt is the receipt of a delivery whose ack subject is reply.
func formatReceipt(deadline time.Time, lease time.Duration, inc, reply string) string {
	return receiptPrefix + strconv.FormatInt(deadline.UnixMilli(), 10) + ":" + strconv.FormatInt(lease.Milliseconds(), 10) +
		":" + inc + ":" + reply
}

// parseReceipt reads a receipt of this queue; ok is false for anything this
// queue could not have issued.
func (q *Queue) parseReceipt(s string) (receipt, bool) {
	rest, ok := strings.CutPrefix(s, receiptPrefix)
	if !ok {
		return receipt{}, false
	}
	parts := strings.SplitN(rest, ":", 4)
	if len(parts) != 4 || strings.ContainsAny(parts[3], " \t\r\n") {
		return receipt{}, false // a subject has no white space: not one we issued
	}
	if inc := parts[2]; inc != noIncarnation && (len(inc) != 16 || strings.Trim(inc, "0123456789abcdef") != "") {
		return receipt{}, false
	}
	dl, err1 := strconv.ParseInt(parts[0], 10, 64)
	ls, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || ls <= 0 {
		return receipt{}, false
	}
	d, ok := q.parseAck(parts[3])
	if !ok {
		return receipt{}, false
	}
	return receipt{deadline: time.UnixMilli(dl), lease: time.Duration(ls) * time.Millisecond,
		inc: parts[2], reply: parts[3], seq: d.seq}, true
}

// delivery is what an ack subject says about its delivery.
type delivery struct {
	seq       uint64    // stream sequence: the message id
	delivered uint64    // deliveries so far, this one included
	stored    time.Time // when the stream stored the message
}

// parseAck reads an ack subject of this queue's consumer:
// $JS.ACK[.<domain>.<account hash>].<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>[.<token>]
func (q *Queue) parseAck(subject string) (delivery, bool) {
	toks := strings.Split(subject, ".")
	if len(toks) < 9 || toks[0] != "$JS" || toks[1] != "ACK" {
		return delivery{}, false
	}
	i := 2
	if len(toks) >= 12 {
		i = 4
	}
	if toks[i] != q.stream || toks[i+1] != consumerName {
		return delivery{}, false
	}
	dc, err1 := strconv.ParseUint(toks[i+2], 10, 64)
	seq, err2 := strconv.ParseUint(toks[i+3], 10, 64)
	ts, err3 := strconv.ParseInt(toks[i+5], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || seq == 0 || dc == 0 {
		return delivery{}, false
	}
	return delivery{seq: seq, delivered: dc, stored: time.Unix(0, ts)}, true
}

// staleMargin is how long before its deadline a receipt is refused: a
// quarter of its lease, at most 250 ms. It covers the time between our
// stamp of the deadline and the server's (ours is taken first, so it is the
// earlier one) and clock skew between the processes using one receipt; skew
// beyond it can let an old receipt ack a redelivered message.
func staleMargin(lease time.Duration) time.Duration {
	return min(lease/4, 250*time.Millisecond)
}

// live reports whether r may still act on its delivery: its lease has not
// ended, this handle did not ack or nack it, and it was issued under the
// consumer's current incarnation (incarnation.go).
func (q *Queue) live(ctx context.Context, s string, r receipt) bool {
	dl, dead := q.deadline(s, r)
	return !dead && time.Now().Before(dl.Add(-staleMargin(r.lease))) && q.current(ctx, r)
}

// deadline is the end of receipt s's lease (parsed: r), an Extend by this
// handle included; dead: this handle acked or nacked it.
func (q *Queue) deadline(s string, r receipt) (dl time.Time, dead bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, dead := q.dead[s]; dead {
		return time.Time{}, true
	}
	if dl, ok := q.extended[s]; ok {
		return dl, false
	}
	return r.deadline, false
}

// pruneLimit is the size of the handle's receipt maps above which entries
// past their deadline (refused by the deadline alone) are dropped.
const pruneLimit = 1024

// A prune that leaves n entries sets the next one at 2n (at least
// pruneLimit): while receipts are live (a 30 s lease holds thousands under
// load) every ack would otherwise walk them all.
func (q *Queue) pruneLocked() {
	if len(q.dead)+len(q.extended)+len(q.nacked) <= max(pruneLimit, q.pruneAt) {
		return
	}
	defer func() { q.pruneAt = 2 * (len(q.dead) + len(q.extended) + len(q.nacked)) }()
	now := time.Now()
	for k, dl := range q.dead {
		if now.After(dl) {
			delete(q.dead, k)
		}
	}
	for k, dl := range q.extended {
		if now.After(dl) {
			delete(q.extended, k)
		}
	}
	for seq, at := range q.nacked {
		if now.Sub(at) > catchUpWait {
			delete(q.nacked, seq)
		}
	}
}
