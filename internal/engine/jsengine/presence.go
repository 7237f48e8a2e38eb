package jsengine

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// AckBatch needs, for each receipt, whether the stream still holds its
// message: a live receipt of a message someone else acked (a handle that
// shared the receipt) or purged is gone, and JetStream answers a second
// +ACK exactly as the first (nats-server 2.15 consumer.go: processAckMsg
// sends the same empty reply whether or not the sequence was pending), so
// the ack's reply cannot tell. One get a message cost most of Consume's
// ack path (measured: BenchmarkVsBare's Consume drain on R1 0.36 -> 0.88
// of the bare loop with no get at all). A presence is what one stream-info
// request with its deleted sequences says about all of a batch at once.

// maxDeleted bounds the deleted sequences a stream-info answer may list for
// a presence (8 to 20 bytes of JSON each). A work queue consumed in order
// has few (the gaps its workers leave); one that holds an old message (a
// delayed send, a dedup marker for its window) lists every message acked
// since. Above it AckBatch reads each message (one get each), as before.
var maxDeleted uint64 = 2048 // a variable for the tests

// wideEvery is how many batches of a stream with more than maxDeleted
// deleted sequences use per-message gets before a plain stream info (no
// list) looks again.
const wideEvery = 32

// presence is the stream's holdings as one stream-info answer told them.
type presence struct {
	first, last uint64
	deleted     map[uint64]struct{}
}

// holds reports whether the stream held seq when it was read.
func (p *presence) holds(seq uint64) bool {
	if seq < p.first || seq > p.last {
		return false
	}
	_, del := p.deleted[seq]
	return !del
}

// streamState is the part of a stream-info answer a presence reads.
type streamState struct {
	Msgs     uint64   `json:"messages"`
	FirstSeq uint64   `json:"first_seq"`
	LastSeq  uint64   `json:"last_seq"`
	Deleted  []uint64 `json:"deleted"`
}

// deletedCount is how many sequences of [first, last] a stream state has
// not got.
func deletedCount(s streamState) uint64 {
	if s.LastSeq < s.FirstSeq || s.LastSeq-s.FirstSeq+1 < s.Msgs {
		return 0
	}
	return s.LastSeq - s.FirstSeq + 1 - s.Msgs
}

// streamInfo reads the stream's state (with its deleted sequences if
// details) and whether a leader answered, with one raw stream-info
// request, decoding only that (jetstream's Stream.Info decodes the whole
// configuration too: measurable on AckBatch's path).
func (q *Queue) streamInfo(ctx context.Context, details bool) (streamState, bool, error) {
	req := []byte(`{}`)
	if details {
		req = []byte(`{"deleted_details":true}`)
	}
	m, err := q.nc.RequestWithContext(ctx, "$JS.API.STREAM.INFO."+q.stream, req)
	if err != nil {
		return streamState{}, false, fmt.Errorf("read stream %s: %w", q.stream, err)
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		State   *streamState `json:"state"`
		Cluster *struct {
			Leader string `json:"leader"`
		} `json:"cluster"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return streamState{}, false, fmt.Errorf("read stream %s: decode the answer: %w", q.stream, err)
	}
	switch {
	case resp.Error != nil:
		return streamState{}, false, fmt.Errorf("read stream %s: %s (code %d, error code %d)", q.stream, resp.Error.Description, resp.Error.Code, resp.Error.ErrCode)
	case resp.State == nil:
		return streamState{}, false, fmt.Errorf("read stream %s: an answer without a state", q.stream)
	}
	return *resp.State, resp.Cluster == nil || resp.Cluster.Leader != "", nil
}

// presenceState is a handle's memory of how wide its stream's deleted list
// was: while it is above maxDeleted, readPresence skips the list.
type presenceState struct {
	wide atomic.Int32 // batches left to skip; 0: read the list
}

// readPresence reads the stream once, with its deleted sequences, from its
// leader. It returns nil (and no error) when the answer cannot serve: the
// list is over maxDeleted (then the next wideEvery batches do not ask), the
// stream has no leader (a member answered for it), or the list does not
// match the counts. The caller then reads each message.
func (q *Queue) readPresence(ctx context.Context) (*presence, error) {
	if n := q.presence.wide.Load(); n > 0 {
		if q.presence.wide.Add(-1) > 0 {
			return nil, nil
		}
		// Look again, without the list.
		st, _, err := q.streamInfo(ctx, false)
		if err != nil {
			return nil, err
		}
		if deletedCount(st) > maxDeleted {
			q.presence.wide.Store(wideEvery)
			return nil, nil
		}
	}
	st, led, err := q.streamInfo(ctx, true)
	if err != nil {
		return nil, err
	}
	n := deletedCount(st)
	switch {
	case n > maxDeleted:
		q.presence.wide.Store(wideEvery)
		return nil, nil
	case !led:
		return nil, nil // answered by a member while the stream elects
	case uint64(len(st.Deleted)) != n:
		return nil, nil
	}
	p := &presence{first: st.FirstSeq, last: st.LastSeq, deleted: make(map[uint64]struct{}, len(st.Deleted))}
	for _, seq := range st.Deleted {
		if seq < p.first || seq > p.last {
			return nil, nil // not the list it should be
		}
		p.deleted[seq] = struct{}{}
	}
	if uint64(len(p.deleted)) != n {
		return nil, nil // a sequence listed twice
	}
	return p, nil
}

// waitAllGone is waitGone for the messages of one AckBatch: one stream
// read per check for all of them, instead of a get (or two) each. Without
// a presence it waits for each, concurrently.
func (q *Queue) waitAllGone(ctx context.Context, seqs []uint64) error {
	if len(seqs) == 1 {
		return q.waitGone(ctx, seqs[0])
	}
	settle := time.Now().Add(ackSettle)
	for wait := 250 * time.Microsecond; ; wait = min(2*wait, 50*time.Millisecond) {
		rctx, cancel := context.WithTimeout(ctx, readTry)
		p, err := q.readPresence(rctx)
		cancel()
		if err != nil || p == nil {
			// The per-message wait has its own bounds and retries.
			return parallel(len(seqs), func(k int) error { return q.waitGone(ctx, seqs[k]) })
		}
		left := seqs[:0]
		for _, seq := range seqs {
			if p.holds(seq) {
				left = append(left, seq)
			}
		}
		if seqs = left; len(seqs) == 0 {
			return nil
		}
		if time.Now().After(settle) {
			return fmt.Errorf("ack message %d: still stored %s after the ack was confirmed", seqs[0], ackSettle)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ack message %d: %w", seqs[0], ctx.Err())
		case <-time.After(wait):
		}
	}
}

// errCodeNoMessage is JetStream's error code of a get of a sequence the
// stream does not hold (JSNoMessageFoundErr, jetstream.ErrMsgNotFound).
const errCodeNoMessage = 10037

// exists reports whether the message with stream sequence seq is stored:
// one raw message-get request whose answer is decoded only for its error
// (jetstream's Stream.GetMsg also decodes the message, base64 payload and
// headers: half of the extra cost of Consume's acks on a stream whose
// deleted list is too wide for a presence, BenchmarkBacklog).
func (q *Queue) exists(ctx context.Context, seq uint64) (bool, error) {
	m, err := q.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+q.stream, []byte(`{"seq":`+strconv.FormatUint(seq, 10)+`}`))
	if err != nil {
		return false, fmt.Errorf("get message %d: %w", seq, err)
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Seq uint64 `json:"seq"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return false, fmt.Errorf("get message %d: decode the answer: %w", seq, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == errCodeNoMessage:
		return false, nil
	case resp.Error != nil:
		return false, fmt.Errorf("get message %d: %s (code %d, error code %d)", seq, resp.Error.Description, resp.Error.Code, resp.Error.ErrCode)
	case resp.Message == nil || resp.Message.Seq != seq:
		return false, fmt.Errorf("get message %d: an answer without it", seq)
	}
	return true, nil
}
