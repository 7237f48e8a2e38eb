package jsengine

// Last errors on the JetStream engine (driver.FailureRecorder).
//
// A failed delivery's error text is kept in a side stream of the queue,
// "LCQE_<name>" (limits retention, file storage, the queue stream's replica
// count, AllowDirect off so reads go through its leader), one subject per
// message: "lcqe.<name>.<stream sequence>", MaxMsgsPerSubject 1 (a newer
// failure replaces the older one), MaxAge lastErrorKeep. The entry's data
// is the text (at most 1 KiB); its header Lc-Stream-Created is the queue
// stream's creation time, so the entries of a deleted and re-created queue
// stream (whose sequences start again) are ignored.
//
// Why a side stream, not headers: JetStream cannot change a stored message,
// and republishing it with a header would give it a new stream sequence
// (its id) and a delivery count of 0. The side stream costs one publish
// with its PubAck per failure (measured in BenchmarkNackFailed) and one
// purge request per ack of a message delivered more than once (a message
// delivered once cannot have failed: NackFailed is a nack, and the next
// delivery counts 2).
//
// Lifetime and bound: NackFailed publishes the entry (PubAck awaited), then
// nacks; an Ack of a redelivered message, a dead-letter move and a redrive
// (ackMoved) purge the message's subject after the source ack, and Purge
// purges the whole side stream. The side stream so holds at most one entry
// per message of the queue that failed at least once, plus entries whose
// purge did not happen (a process that died between the ack and the purge,
// or a purge that failed: logged), each at most 1 KiB of text and kept at
// most lastErrorKeep. The stream is created by the first failure (an Open
// costs nothing more).
//
// Not one commit: the entry is written before the Nak, so a process killed
// between them leaves the error recorded and the message comes back when
// its lease ends, as after a failed Nack; a receipt that goes stale between
// the liveness check and the Nak leaves the error recorded on a message
// redelivered meanwhile.
//
// A dead-letter move carries the text in the dead letter's header
// Lc-Origin-Last-Error (escaped: % and control bytes as %XX, since a NATS
// header holds no line breaks); Peek shows a message's side-stream entry,
// else that header. A redrive starts the message afresh, without it, as the
// SQLite engine does.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// Headers of last errors.
const (
	hdrStreamCreated   = "Lc-Stream-Created"    // on an entry: the queue stream's creation, Unix ns
	hdrFailedAt        = "Lc-Failed-Ms"         // on an entry: when the delivery failed, Unix ms
	hdrOriginLastError = "Lc-Origin-Last-Error" // on a dead letter: its last error there, escaped
)

// maxLastErrorBytes is queue.MaxLastErrorBytes (not imported: the queue
// package sits above the engines).
const maxLastErrorBytes = 1024

// lastErrorKeep is the side stream's MaxAge: an entry is dropped this long
// after its failure even if its message is still queued. It is well above
// the longest nack delay (12 h), so a message waiting out its retry keeps
// its error; a message that waits longer than a week after its last failure
// shows none.
const lastErrorKeep = 7 * 24 * time.Hour

func (q *Queue) errStream() string { return "LCQE_" + q.name }
func (q *Queue) errSubject(seq uint64) string {
	return "lcqe." + q.name + "." + strconv.FormatUint(seq, 10)
}

// created is the queue stream's creation time as entries record it.
func (q *Queue) created() string {
	if info := q.st.CachedInfo(); info != nil {
		return strconv.FormatInt(info.Created.UnixNano(), 10)
	}
	return ""
}

// NackFailed is Nack that first records lastError as the message's last
// error (see the top of this file). A receipt that is stale, gone or not
// one of ours records nothing and is answered as Nack answers it.
func (q *Queue) NackFailed(ctx context.Context, s string, delay time.Duration, lastError string) error {
	if err := q.check(true); err != nil {
		return err
	}
	r, ok := q.parseReceipt(s)
	if ok && lastError != "" && q.live(ctx, s, r) {
		if err := q.recordLastError(ctx, r.seq, cutText(lastError)); err != nil {
			// The retry schedule matters more than the text: nack anyway.
			q.dl.log.Warn("jetstream queue: cannot record a failed delivery's last error; nacking it without",
				"store", q.Path(), "id", r.seq, "err", err)
		}
	}
	return q.Nack(ctx, s, delay)
}

// recordLastError publishes the entry of message seq, creating the side
// stream if it does not exist yet.
func (q *Queue) recordLastError(ctx context.Context, seq uint64, text string) error {
	m := nats.NewMsg(q.errSubject(seq))
	m.Data = []byte(text)
	m.Header.Set(hdrStreamCreated, q.created())
	m.Header.Set(hdrFailedAt, strconv.FormatInt(time.Now().UnixMilli(), 10))
	_, err := q.js.PublishMsg(ctx, m, jetstream.WithExpectStream(q.errStream()))
	if !errors.Is(err, jetstream.ErrNoStreamResponse) {
		return err
	}
	if err := q.ensureErrStream(ctx); err != nil {
		return err
	}
	_, err = q.js.PublishMsg(ctx, m, jetstream.WithExpectStream(q.errStream()))
	return err
}

// ensureErrStream creates the side stream (or finds it created meanwhile)
// and waits for its leader.
func (q *Queue) ensureErrStream(ctx context.Context) error {
	replicas := 1
	if info := q.st.CachedInfo(); info != nil && info.Config.Replicas > 0 {
		replicas = info.Config.Replicas
	}
	st, err := q.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:              q.errStream(),
		Description:       "localcloud: last errors of the failed deliveries of queue " + q.name,
		Subjects:          []string{"lcqe." + q.name + ".*"},
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		Storage:           jetstream.FileStorage,
		Replicas:          replicas,
		MaxMsgsPerSubject: 1,
		MaxAge:            lastErrorKeep,
		AllowDirect:       false,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		st, err = q.js.Stream(ctx, q.errStream())
	}
	if err != nil {
		return fmt.Errorf("create stream %q: %w", q.errStream(), err)
	}
	return waitStreamLeader(ctx, st)
}

// dropLastError removes the entry of the message whose delivery's ack
// subject is reply, after that delivery was acked (or moved). A delivery
// counted once has none. A failure is logged: the entry then ends by
// MaxAge.
func (q *Queue) dropLastError(ctx context.Context, reply string) {
	d, ok := q.parseAck(reply)
	if !ok || d.delivered < 2 {
		return
	}
	if err := q.purgeErrStream(ctx, q.errSubject(d.seq)); err != nil {
		q.dl.log.Warn("jetstream queue: cannot remove an acked message's last error; it expires by itself",
			"store", q.Path(), "id", d.seq, "expires_after", lastErrorKeep, "err", err)
	}
}

// purgeLastErrors empties the side stream (Purge).
func (q *Queue) purgeLastErrors(ctx context.Context) error {
	if err := q.purgeErrStream(ctx, ""); err != nil {
		return fmt.Errorf("purge last errors of %s: %w", q.stream, err)
	}
	return nil
}

// purgeErrStream purges filter ("" for all) from the side stream with one
// raw API request; a side stream that does not exist holds nothing.
func (q *Queue) purgeErrStream(ctx context.Context, filter string) error {
	req := []byte(`{}`)
	if filter != "" {
		req, _ = json.Marshal(map[string]string{"filter": filter})
	}
	ctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	resp, err := q.nc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+q.errStream(), req)
	if err != nil {
		return err
	}
	var r struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return fmt.Errorf("purge reply %q: %w", resp.Data, err)
	}
	if r.Error == nil || r.Error.ErrCode == int(jetstream.JSErrCodeStreamNotFound) {
		return nil
	}
	return fmt.Errorf("purge: %s (code %d, error code %d)", r.Error.Description, r.Error.Code, r.Error.ErrCode)
}

// errStreamHandle returns the side stream, nil if it does not exist.
func (q *Queue) errStreamHandle(ctx context.Context) (jetstream.Stream, error) {
	st, err := q.js.Stream(ctx, q.errStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up stream %q: %w", q.errStream(), err)
	}
	return st, nil
}

// entryText is an entry's text, "" for an entry of another incarnation of
// the queue stream; text another program wrote is cut to the bound.
func (q *Queue) entryText(m *jetstream.RawStreamMsg) string {
	if m.Header.Get(hdrStreamCreated) != q.created() {
		return ""
	}
	return cutText(string(m.Data))
}

// lastErrorOf reads message seq's entry ("" if none).
func (q *Queue) lastErrorOf(ctx context.Context, st jetstream.Stream, seq uint64) (string, error) {
	m, err := st.GetLastMsgForSubject(ctx, q.errSubject(seq))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the last error of message %d: %w", seq, err)
	}
	return q.entryText(m), nil
}

// peekLastErrors sets LastError of the peeked messages that have an entry
// (it replaces a dead letter's Lc-Origin-Last-Error: the entry is newer).
// Cost: two requests when no message of the queue has failed, else one
// more per peeked message with an entry.
func (q *Queue) peekLastErrors(ctx context.Context, out []driver.PeekedMessage) error {
	if len(out) == 0 {
		return nil
	}
	st, err := q.errStreamHandle(ctx)
	if err != nil || st == nil {
		return err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("lcqe."+q.name+".*"))
	if err != nil {
		return fmt.Errorf("read stream %q: %w", q.errStream(), err)
	}
	if len(info.State.Subjects) == 0 {
		return nil
	}
	for i := range out {
		seq := uint64(out[i].ID)
		if info.State.Subjects[q.errSubject(seq)] == 0 {
			continue
		}
		text, err := q.lastErrorOf(ctx, st, seq)
		if err != nil {
			return err
		}
		if text != "" {
			out[i].LastError = text
		}
	}
	return nil
}

// carryLastError sets the dead letter dm's Lc-Origin-Last-Error to the
// moved delivery m's last error: its entry, else (a dead letter moved on
// again) m's own header. A read that fails is logged and the move goes on
// without the text: a dead letter matters more than its error.
func (q *Queue) carryLastError(ctx context.Context, m *nats.Msg, dm *nats.Msg) {
	text := headerLastError(m.Header)
	if d, ok := q.deliveryOf(m); ok && d.delivered >= 2 {
		st, err := q.errStreamHandle(ctx)
		if err == nil && st != nil {
			var t string
			if t, err = q.lastErrorOf(ctx, st, d.seq); t != "" {
				text = t
			}
		}
		if err != nil {
			q.dl.log.Warn("jetstream queue: cannot read a dead letter's last error; moving it without",
				"store", q.Path(), "id", d.seq, "err", err)
		}
	}
	if text != "" {
		dm.Header.Set(hdrOriginLastError, escapeHeader(text))
	}
}

// headerLastError is a dead letter's Lc-Origin-Last-Error, unescaped (a
// value that is no escape of ours is shown as it is), cut to the bound.
func headerLastError(h nats.Header) string {
	v := h.Get(hdrOriginLastError)
	if v == "" {
		return ""
	}
	if s, ok := unescapeHeader(v); ok {
		v = s
	}
	return cutText(v)
}

// cutText cuts s to maxLastErrorBytes on a UTF-8 boundary, ending in "..."
// when cut (as queue does).
func cutText(s string) string {
	if len(s) <= maxLastErrorBytes {
		return s
	}
	n := maxLastErrorBytes - len("...")
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "..."
}

// escapeHeader writes '%', control bytes and DEL as %XX: a NATS header
// value holds no line breaks.
func escapeHeader(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' || c < 0x20 || c == 0x7f {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// unescapeHeader reverses escapeHeader; ok is false for a value with a
// '%' not followed by two hex digits.
func unescapeHeader(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), true
}
