package sqlitequeue

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// options are what a handle is opened with.
type options struct {
	clock      func() time.Time
	logger     *slog.Logger
	durability bindings.Durability
	readOnly   bool
	notifier   interface{ MessageDue() }
	wake       wakeOptions // hints.go
	binding    string      // the binding name, recorded as the origin of dead letters
	dead       deadLetterOptions
	internal   bool // a handle a transfer opened on its destination (deadletter.go)
	targets    []string
	// dedupWindow is how long dedup keys are remembered; 0: the default.
	dedupWindow time.Duration
}

// defaultDedupWindow is queue.DefaultDedupWindow.
const defaultDedupWindow = 5 * time.Minute

// Engine is the SQLite engine; its zero value is ready to use.
type Engine struct{}

// Open opens the queue at cfg.Location: "memory:NAME" or a directory.
func (Engine) Open(ctx context.Context, cfg driver.Config) (driver.Queue, error) {
	q, err := OpenConfig(ctx, cfg)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return q, nil
}

// OpenConfig is Open returning the engine's own type, for localcloud's
// tools, which keep it beside the public handle (queue.New).
func OpenConfig(ctx context.Context, cfg driver.Config) (*Queue, error) {
	if cfg.Location == "" && cfg.Binding != nil {
		var err error
		if cfg, err = bindingConfig(cfg); err != nil { // env.go
			return nil, err
		}
	}
	if cfg.NoCreate {
		if err := needStores(cfg.Location, cfg.DeadLetter.Location); err != nil {
			return nil, err
		}
	}
	o := options{clock: cfg.Clock, logger: cfg.Logger, durability: bindings.Durability(cfg.Durability),
		readOnly: cfg.ReadOnly, notifier: cfg.Notifier, binding: cfg.BindingName,
		targets: append([]string(nil), cfg.MoveTargets...), dedupWindow: cfg.DedupWindow,
		wake: wakeOptions{url: cfg.Hints.URL, token: cfg.Hints.Token, subject: cfg.Hints.Subject, runtimeFile: cfg.Hints.RuntimeFile,
			noLocalWake: cfg.Hints.NoLocalWake}}
	if o.durability == "" {
		o.durability = bindings.DurabilityNormal
	}
	if cfg.DeadLetter.MaxAttempts > 0 || cfg.DeadLetter.Location != "" {
		o.dead = deadLetterOptions{maxAttempts: cfg.DeadLetter.MaxAttempts, dlq: cfg.DeadLetter.Location, set: true}
	}
	return openLocation(ctx, cfg.Location, o)
}

// WaitChans returns channels that are closed by the next in-process wake
// and by the next NATS hint (nil without hints).
func (q *Queue) WaitChans() (local, remote <-chan struct{}) { return q.hints.waitChans() }

// Done is closed by Close.
func (q *Queue) Done() <-chan struct{} { return q.hints.done }

// stmtNextVisible finds when the next message that is not due yet becomes
// due: a lease that ends or a delayed message. The spec's index
// idx_messages_visible leads with visible_at, so this is one index seek.
const stmtNextVisible = `SELECT MIN(visible_at) FROM messages WHERE visible_at > ?1`

// NextDue returns the earliest visible_at later than after. ok is false
// when no message is waiting for a future visible_at.
func (q *Queue) NextDue(ctx context.Context, after time.Time) (next time.Time, ok bool, err error) {
	st, err := q.db.ReadStmt(ctx, stmtNextVisible)
	if err != nil {
		return time.Time{}, false, err
	}
	var v any // a REAL from another program (rows.go) is rounded up: the row is not due before
	if err := st.QueryRowContext(ctx, after.UnixMilli()).Scan(&v); err != nil {
		return time.Time{}, false, err
	}
	ms, ok := sqlstore.IntValue(v, true)
	if !ok { // none, or only visible_at values that are no number: never due
		return time.Time{}, false, nil
	}
	return time.UnixMilli(ms), true, nil
}

// AckBatch is Ack of several receipts in one transaction, with each
// receipt's outcome: current (deleted), gone (no such message, or not a
// receipt of the form "{id}:{uuid}") or stale (redelivered since: not
// deleted). A stale receipt does not fail the others.
func (q *Queue) AckBatch(ctx context.Context, receipts []string) ([]driver.AckOutcome, error) {
	out := make([]driver.AckOutcome, len(receipts))
	// Each run sets every outcome, so the acks may join a group commit.
	err := q.db.WriteGroup(ctx, func(tx *sqlstore.Tx) error {
		for i, r := range receipts {
			out[i] = driver.AckGone
			id, u, ok := parseReceipt(r)
			if !ok {
				continue
			}
			res, err := tx.Exec(ctx, stmtAck, id, u)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 1 {
				out[i] = driver.AckCurrent
				if q.hasAttrs.Load() {
					if _, err := tx.Exec(ctx, stmtDeleteAttrs, id); err != nil {
						return err
					}
				}
				continue
			}
			if err := q.staleIfExists(ctx, tx, res, id); errors.Is(err, ErrStaleReceipt) {
				out[i] = driver.AckStale
			} else if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, opErr(err, "ack %d messages", len(receipts))
	}
	return out, nil
}

// delayMillis is d in whole milliseconds, rounded up so that a message is
// never due before its delay has passed.
func delayMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
