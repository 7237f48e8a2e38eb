package jsengine

// Incarnations: which life of the consumer a receipt was issued under.
//
// JetStream matches an ack to a message by stream sequence only: an ack
// from delivery 1 that arrives after the message was delivered again
// removes it (jetstream-notes.md). Without restarts the receipt's lease end
// guards against that (the server redelivers only after it). Across a
// restart or a leader change it does not: the server restores its pending
// deliveries with whole-second timestamps (measured: redelivered about
// 500 ms before the lease ended) or not at all (redelivered at once), and a
// new consumer leader redelivers on its own clock. So a receipt carries a
// token of the incarnation it was issued under, and every ack, nack and
// extend first compares it with the current one: a receipt of another
// incarnation is stale (ErrStaleReceipt), deletes nothing, and its message
// comes again when the lease the new incarnation holds ends.
//
// The token:
//   - a server without a cluster: the server's id, which nats-server draws
//     anew at every start (server.NewServer: nkeys.CreateServer). The
//     connection knows the id of the server it is connected to, so the
//     check costs no request.
//   - a cluster: the consumer leader's name and the time it was elected
//     (ClusterInfo.LeaderSince), read with a consumer info request and
//     kept until a leader-elected advisory of the consumer arrives or the
//     connection reconnects (advisories sent meanwhile are lost), or while
//     an advisory waits in the subscription for its callback; the next
//     check reads it again.
//
// A delivery is tagged with the token read before its pull request; if the
// token changed by the time the pull ended (a reconnect, an election), it
// gets noIncarnation, which no check accepts.

import (
	"context"
	"encoding/hex"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// noIncarnation tags a receipt whose incarnation is not known: it never
// acks.
const noIncarnation = "-"

// incarnations is a handle's view of its consumer's incarnation.
type incarnations struct {
	// server: no cluster, the token is the connected server's id.
	server bool
	// answered: when the server last answered this handle, Unix ns
	// (confirmServer).
	answered atomic.Int64
	sub      *nats.Subscription // leader-elected advisories (cluster)

	mu         sync.Mutex
	token      string // the leader's token, "" until read
	gen        uint64 // advisories seen
	reconnects uint64 // the connection's reconnects when token was read
}

// incToken hashes an incarnation's identity to 16 hex digits (a receipt
// field, so no ':').
func incToken(kind, id string) string {
	h := fnv.New64a()
	h.Write([]byte(kind + "\x00" + id))
	return hex.EncodeToString(h.Sum(nil))
}

// leaderToken is the token of a consumer's leadership term.
func leaderToken(c *jetstream.ClusterInfo) string {
	if c == nil || c.Leader == "" {
		return noIncarnation
	}
	since := ""
	if c.LeaderSince != nil {
		since = c.LeaderSince.UTC().Format(time.RFC3339Nano)
	}
	return incToken("leader", c.Leader+"\x00"+since)
}

// watchIncarnation sets up the handle's view: a server without a cluster
// (the connection has no cluster name), or a cluster, whose leader changes
// it hears of by advisory, subscribed before the leader is first read.
func (q *Queue) watchIncarnation() error {
	if q.nc.ConnectedClusterName() == "" {
		q.inc.server = true
		return nil
	}
	sub, err := q.nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED."+q.stream+"."+consumerName, func(*nats.Msg) {
		q.inc.mu.Lock()
		q.inc.gen++
		q.inc.token = ""
		q.inc.mu.Unlock()
	})
	if err != nil {
		return err
	}
	q.inc.sub = sub
	return nil
}

// cachedIncarnation is the current token if it is known without a request
// ("" otherwise).
func (q *Queue) cachedIncarnation() string {
	if q.inc.server {
		id := q.nc.ConnectedServerId()
		if id == "" || !q.nc.IsConnected() {
			return ""
		}
		return incToken("server", id)
	}
	rc := q.nc.Stats().Reconnects
	// An advisory the connection has read but the subscription's
	// goroutine has not handed to its callback yet: the kept token is of
	// an earlier term (seen under load: another subscriber of the same
	// advisory on the same connection had it, this one's callback had not
	// run yet).
	if n, _, err := q.inc.sub.Pending(); err == nil && n > 0 {
		return ""
	}
	q.inc.mu.Lock()
	defer q.inc.mu.Unlock()
	if q.inc.reconnects != rc {
		return ""
	}
	return q.inc.token
}

// incarnation is the current token, read from the server if need be; on
// an error (no leader to answer) noIncarnation.
func (q *Queue) incarnation(ctx context.Context) string {
	if q.inc.server {
		// Reconnecting: a request sent now goes to the server it
		// reconnects to, whose id is not known yet; wait for it.
		deadline := time.Now().Add(flushTimeout)
		for !q.nc.IsConnected() && !q.nc.IsClosed() && ctx.Err() == nil && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if tok := q.cachedIncarnation(); tok != "" || q.inc.server {
		if tok == "" {
			return noIncarnation
		}
		return tok
	}
	// No leader to answer (an election): ask again, up to electionWait.
	deadline := time.Now().Add(electionWait)
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		tok, err := q.readIncarnation(ctx)
		if err == nil {
			return tok
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return noIncarnation
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// readIncarnation reads the current token from the server (a cluster's
// consumer leader; a server's id from the connection) and keeps it.
func (q *Queue) readIncarnation(ctx context.Context) (string, error) {
	if q.inc.server {
		if _, err := q.cons.Info(ctx); err != nil {
			return "", err
		}
		if tok := q.cachedIncarnation(); tok != "" {
			return tok, nil
		}
		return "", nats.ErrConnectionReconnecting
	}
	rc := q.nc.Stats().Reconnects
	q.inc.mu.Lock()
	gen := q.inc.gen
	q.inc.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, readTry)
	ci, err := q.cons.Info(rctx)
	cancel()
	if err != nil {
		return "", err
	}
	tok := leaderToken(ci.Cluster)
	q.inc.mu.Lock()
	if q.inc.gen == gen { // no election since the request
		q.inc.token, q.inc.reconnects = tok, rc
	}
	q.inc.mu.Unlock()
	return tok, nil
}

// confirmServer makes sure, on a server without a cluster, that the
// connection's server id is of the server that answers now: a connection
// that has not yet noticed its server died (its reader starved under
// load: seen at load 17) still reports the old id, and a +ACK written to
// it then would be sent again to the restarted server after the
// reconnect. A round trip (a flush) first: it fails or comes back from the
// server the id then names. Ack, AckBatch, Nack and Extend call it once
// before they check receipts, unless the server answered this handle
// within the last confirmFresh (a pull's deliveries, an ack's reply), as
// it does in a receive-then-ack loop. What remains: a server killed
// within confirmFresh before an ack (or right after the flush) and
// restarted before the connection notices.
func (q *Queue) confirmServer(ctx context.Context) {
	if !q.inc.server || time.Since(time.Unix(0, q.inc.answered.Load())) < confirmFresh {
		return
	}
	if q.flush(ctx) == nil {
		q.answered()
	}
}

// confirmFresh is how recent an answer of the server spares confirmServer
// its round trip.
const confirmFresh = 10 * time.Millisecond

// answered notes that the server just answered this handle.
func (q *Queue) answered() { q.inc.answered.Store(time.Now().UnixNano()) }

// current reports whether receipt r was issued under the current
// incarnation.
func (q *Queue) current(ctx context.Context, r receipt) bool {
	return r.inc != noIncarnation && r.inc == q.incarnation(ctx)
}

// stillIncarnation reports whether tok, read before a pull, is still the
// current token. On a cluster whose kept token was dropped meanwhile (an
// advisory: often the late one of the election tok was read from) it
// reads the leader again: the same leader and election time is the same
// term, as election times do not repeat. A read that fails (a consumer
// info request that timed out on a loaded machine) is tried again as
// incarnation does, up to electionWait: a delivery tagged unknown never
// acks and is handled again when its lease ends.
func (q *Queue) stillIncarnation(ctx context.Context, tok string) bool {
	if tok == noIncarnation {
		return false
	}
	if now := q.cachedIncarnation(); now != "" || q.inc.server {
		return now == tok
	}
	return q.incarnation(ctx) == tok
}
