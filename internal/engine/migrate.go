package engine

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	qdriver "github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/internal/engine/moverec"
)

// QueueMover is what `localcloud migrate` reads and writes one queue store
// through, on either end of a move between engines. Not safe for
// concurrent use.
type QueueMover interface {
	// Source names the store in the import records of the stores its
	// messages move to ("sqlite:DIR", "jetstream:STREAM").
	Source() string
	// Leased counts the messages a consumer other than this mover holds
	// now (a nacked message waiting for its delay may count: the engines
	// do not tell them apart) and when the last of their leases ends, as
	// far as the engine knows.
	Leased(ctx context.Context) (n int64, until time.Time, err error)
	// Export returns the next up to max messages that no consumer holds;
	// none at the end of a round, after which it starts over.
	Export(ctx context.Context, max int) ([]moverec.Message, error)
	// Remove deletes exported messages by their ids; one already gone is
	// skipped.
	Remove(ctx context.Context, ids []int64) error
	// Release gives back what Export holds (a stop before Remove).
	Release()
	// Dedups returns the dedup keys the queue remembers; ClearDedup
	// forgets them.
	Dedups(ctx context.Context) ([]moverec.Dedup, error)
	ClearDedup(ctx context.Context) error
	// Imported returns the messages of source already imported here, by
	// their id there, with their id here.
	Imported(ctx context.Context, source string) (map[int64]int64, error)
	// Import adds the messages of source that done does not hold, and
	// adds them to done. Repeated, it adds nothing twice.
	Import(ctx context.Context, source string, ms []moverec.Message, done map[int64]int64) error
	// ImportDedup remembers dedup keys; ids maps their message ids in the
	// source to those here.
	ImportDedup(ctx context.Context, ds []moverec.Dedup, ids map[int64]int64) error
	// ReadBack returns the payloads of messages here by id (absent: gone,
	// or no longer at that id).
	ReadBack(ctx context.Context, ids []int64) (map[int64]qdriver.Payload, error)
	Close() error
}

// MigrateOptions tune Migrate.
type MigrateOptions struct {
	// Batch is how many messages or keys move per step; 0: 500.
	Batch int
	// Lease is how long a mover holds the messages it exports from a
	// queue whose engine claims to read (jetstream); 0: 1 minute.
	Lease time.Duration
	// Wait is how long to wait for messages leased to consumers; 0:
	// refuse at once.
	Wait time.Duration
	// Progress, if set, is called after each step.
	Progress func(moved int)
}

// MigrateResult says what a Migrate did.
type MigrateResult struct {
	// Moved counts the messages or keys now in the destination that left
	// the source in this run; Already those a killed run had copied.
	Moved, Already int
	Dedup          int // dedup keys carried over
}

// ErrLeased is matched by the error of a Migrate refused because
// consumers hold messages of the source.
var ErrLeased = fmt.Errorf("messages of the source queue are leased to consumers")

// Migrate moves the store of binding src to the store of binding dst (the
// same binding on another engine): every message with its attempts, delay,
// last error and dead-letter origin, and the queue's dedup keys, or every
// key with its value and TTL; page by page it copies, verifies the copy by
// reading it back, and only then removes it from the source. Killed at any
// point and run again, it finishes with nothing lost and nothing twice: a
// queue's import is idempotent by the source's message ids, a key's put is
// idempotent by itself.
func Migrate(ctx context.Context, env *Env, src, dst Handle, o MigrateOptions) (MigrateResult, error) {
	if o.Batch <= 0 {
		o.Batch = 500
	}
	if o.Lease <= 0 {
		o.Lease = time.Minute
	}
	if src.Queue() != nil {
		return migrateQueue(ctx, src, dst, o)
	}
	return migrateKV(ctx, src, dst, o)
}

func migrateQueue(ctx context.Context, src, dst Handle, o MigrateOptions) (res MigrateResult, err error) {
	from, err := src.QueueMover(ctx, o.Lease)
	if err != nil {
		return res, err
	}
	defer from.Close()
	to, err := dst.QueueMover(ctx, o.Lease)
	if err != nil {
		return res, err
	}
	defer to.Close()
	defer func() {
		if err != nil {
			from.Release()
		}
	}()
	source := from.Source()
	done, err := to.Imported(ctx, source)
	if err != nil {
		return res, err
	}
	// The dedup keys first: a send of a key after the move must still be
	// a duplicate. They are forgotten in the source once it is empty.
	ds, err := from.Dedups(ctx)
	if err != nil {
		return res, err
	}
	if err := to.ImportDedup(ctx, ds, nil); err != nil {
		return res, err
	}
	res.Dedup = len(ds)
	// Rounds: each moves what is not leased to a consumer; messages
	// leased meanwhile are waited for (up to o.Wait) and moved by a later
	// round, or left in the source with the refusal.
	deadline := time.Now().Add(o.Wait)
	for {
		if err := moveRound(ctx, from, to, source, done, o, &res); err != nil {
			return res, err
		}
		n, until, err := from.Leased(ctx)
		if err != nil {
			return res, err
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			how := "refusing to move them"
			if o.Wait > 0 {
				how = "waited " + o.Wait.String() + " for them"
			}
			return res, fmt.Errorf("%w: %s leased to consumers (received and not acked, or nacked with a delay) until %s at the latest stayed in the source; %s, as moving a leased message would deliver it twice. "+
				"Stop the apps that use the binding and run migrate again once the leases end, or pass --wait %s",
				ErrLeased, Count(n, "message"), until.Format(time.RFC3339), how, (time.Until(until) + time.Second).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err := from.ClearDedup(ctx); err != nil {
		return res, err
	}
	return res, nil
}

// verifyQueue reads the imports of ms back: each recorded (rec, from the
// import), its payload the same.
func verifyQueue(ctx context.Context, to QueueMover, source string, ms []moverec.Message, rec map[int64]int64) error {
	ids := make([]int64, 0, len(ms))
	for _, m := range ms {
		id, ok := rec[m.ID]
		if !ok {
			return fmt.Errorf("verify: message %d of %s is not in the destination after its import; the source keeps it", m.ID, source)
		}
		ids = append(ids, id)
	}
	got, err := to.ReadBack(ctx, ids)
	if err != nil {
		return err
	}
	for i, m := range ms {
		p, ok := got[ids[i]]
		if !ok {
			continue // delivered meanwhile, or a schedule that fired: recorded above
		}
		if p.Type != m.Payload.Type || p.Data != m.Payload.Data || !bytes.Equal(p.Attrs, m.Payload.Attrs) {
			return fmt.Errorf("verify: message %d of %s reads back as a %s payload of %d bytes with %d bytes of attributes, not the %s payload of %d bytes with %d bytes of attributes sent; the source keeps it",
				m.ID, source, p.Type, len(p.Data), len(p.Attrs), m.Payload.Type, len(m.Payload.Data), len(m.Payload.Attrs))
		}
	}
	return nil
}

// moveRound moves every message the source hands out now, page by page:
// import, verify, remove.
func moveRound(ctx context.Context, from, to QueueMover, source string, done map[int64]int64, o MigrateOptions, res *MigrateResult) error {
	for {
		ms, err := from.Export(ctx, o.Batch)
		if err != nil || len(ms) == 0 {
			return err
		}
		for _, m := range ms {
			if _, ok := done[m.ID]; ok {
				res.Already++
			}
		}
		if err := to.Import(ctx, source, ms, done); err != nil {
			return err
		}
		if err := verifyQueue(ctx, to, source, ms, done); err != nil {
			return err
		}
		ids := make([]int64, len(ms))
		for i, m := range ms {
			ids[i] = m.ID
		}
		if err := from.Remove(ctx, ids); err != nil {
			return err
		}
		res.Moved += len(ms)
		if o.Progress != nil {
			o.Progress(res.Moved)
		}
	}
}

// kvExpirySlack is how far a copied key's expiry may be from its source's:
// a TTL is carried as what is left of it at the put, in milliseconds.
const kvExpirySlack = 2 * time.Second

// migrateKV moves the keys page by page: put with what is left of its TTL,
// read back, then deleted from the source. A page is always the first of
// what the source still holds, so a rerun picks up where a kill stopped.
func migrateKV(ctx context.Context, src, dst Handle, o MigrateOptions) (res MigrateResult, err error) {
	from, to := src.KV(), dst.KV()
	batch := min(o.Batch, kv.MaxScanLimit)
	for {
		page, err := from.Scan(ctx, "", batch, "")
		if err != nil {
			return res, err
		}
		if len(page.Items) == 0 {
			return res, nil
		}
		live := page.Items[:0:0]
		for _, it := range page.Items {
			var opts []kv.PutOption
			if !it.ExpiresAt.IsZero() {
				left := time.Until(it.ExpiresAt)
				if left <= 0 {
					continue // expired meanwhile: deleted below
				}
				opts = append(opts, kv.WithTTL(left))
			}
			if _, err := to.Put(ctx, it.Key, it.Value, opts...); err != nil {
				return res, err
			}
			live = append(live, it)
		}
		for _, it := range live {
			e, ok, err := to.Lookup(ctx, it.Key)
			if err != nil {
				return res, err
			}
			switch {
			case !ok && !it.ExpiresAt.IsZero() && time.Until(it.ExpiresAt) <= kvExpirySlack:
				// expired since the put
			case !ok:
				return res, fmt.Errorf("verify: key %q is not in the destination after its put; the source keeps it", it.Key)
			case !bytes.Equal(e.Value, it.Value):
				return res, fmt.Errorf("verify: key %q reads back as %d bytes, not the %d bytes put; the source keeps it", it.Key, len(e.Value), len(it.Value))
			case e.ExpiresAt.IsZero() != it.ExpiresAt.IsZero() || e.ExpiresAt.Sub(it.ExpiresAt).Abs() > kvExpirySlack:
				return res, fmt.Errorf("verify: key %q reads back expiring %v, not %v; the source keeps it", it.Key, e.ExpiresAt, it.ExpiresAt)
			}
		}
		for _, it := range page.Items {
			if err := from.Delete(ctx, it.Key); err != nil {
				return res, err
			}
		}
		res.Moved += len(live)
		if o.Progress != nil {
			o.Progress(res.Moved)
		}
	}
}
