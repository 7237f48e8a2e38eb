package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
)

// Checkpoints run in the background. SQLite's automatic checkpoint runs on
// the connection whose commit takes the WAL past 1000 pages, inside that
// commit: the caller waits while the pages are copied into the database
// file and both files are fsynced (2 to 12 ms each on the 2-core VM), every
// 200 or so sends. Here a goroutine with a connection of its own runs
// PRAGMA wal_checkpoint(PASSIVE) after every ckptEvery commits of the
// handle, so the copying and the fsyncs happen beside the writers. A
// passive checkpoint never waits for readers or writers, and writers never
// wait for it.
//
// SQLite rewinds the WAL only when a write starts after a checkpoint has
// copied all of it. Between bursts of writes that happens by itself; under
// a steady stream the writers keep one step ahead of the copy, so once the
// WAL holds ckptCatchUp pages the goroutine takes the store's write lock
// and copies the rest while no localcloud writer can add to it. Writers
// then wait for that short copy and its fsyncs, once per ckptCatchUp pages.
// The WAL file of a busy store so stays at about 8 MB until its last handle
// closes (SQLite's default is 4 MB); journal_size_limit cuts back anything
// beyond 16 MB (a reader that held a snapshot for long) when SQLite rewinds
// it. Cutting it back to 4 MB instead cost 15% of sequential sends, which
// then grew the file again every cycle.
//
// SQLite's automatic checkpoint stays on as the backstop, at ckptBackstop
// pages instead of 1000: handles that commit too little to wake their
// goroutine (a CLI send, an app that sends a few messages and exits) while
// another process keeps the store open, so that no close checkpoints, would
// otherwise grow the WAL without end. Other programs writing the store keep
// their own setting.

const (
	// ckptEvery is the number of commits between background checkpoints.
	ckptEvery = 64
	// ckptCatchUp is the WAL size, in pages, from which a checkpoint holds
	// the write lock to finish: 8 MB with 4 KiB pages.
	ckptCatchUp = 2000
	// ckptBackstop is the WAL size, in pages, from which a commit runs
	// SQLite's own checkpoint (wal_autocheckpoint): 16 MB, twice
	// ckptCatchUp, so a busy handle's goroutine gets there first.
	ckptBackstop = 2 * ckptCatchUp
	// walSizeLimit is the size the WAL file is cut back to when SQLite
	// rewinds it (journal_size_limit), in bytes.
	walSizeLimit = 16 << 20
)

// walPragmas are the writer connection's settings when a checkpointer runs.
var walPragmas = []string{
	fmt.Sprintf("PRAGMA wal_autocheckpoint = %d", ckptBackstop),
	fmt.Sprintf("PRAGMA journal_size_limit = %d", walSizeLimit),
}

// checkpointer is the background checkpoint of one handle.
type checkpointer struct {
	dsn  string
	path string
	lock *writeLock
	log  *slog.Logger
	kick chan struct{}
	ctx  context.Context // ends when the handle closes
	stop context.CancelFunc
	wg   sync.WaitGroup

	commits int // commits since the last kick; guarded by the write lock
}

func newCheckpointer(dsn, path string, lock *writeLock, log *slog.Logger) *checkpointer {
	c := &checkpointer{dsn: dsn, path: path, lock: lock, log: log,
		kick: make(chan struct{}, 1)}
	c.ctx, c.stop = context.WithCancel(context.Background())
	c.wg.Go(c.run)
	return c
}

// committed counts a commit and wakes the goroutine every ckptEvery of
// them. Called with the write lock held; never blocks.
func (c *checkpointer) committed() {
	if c == nil {
		return
	}
	c.commits++
	if c.commits < ckptEvery {
		return
	}
	c.commits = 0
	select {
	case c.kick <- struct{}{}:
	default: // one is already pending
	}
}

func (c *checkpointer) run() {
	var conn *sql.DB
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.kick:
		}
		if conn == nil {
			var err error
			if conn, err = sql.Open("sqlite", c.dsn); err != nil {
				c.log.Debug("background checkpoint: open", "path", c.path, "err", err)
				conn = nil
				continue
			}
			conn.SetMaxOpenConns(1)
			conn.SetMaxIdleConns(1)
			conn.SetConnMaxIdleTime(0)
		}
		frames, err := c.checkpoint(conn)
		if err == nil && frames >= ckptCatchUp {
			err = c.catchUp(conn)
		}
		if err != nil {
			// The next kick tries again.
			c.log.Debug("background checkpoint", "path", c.path, "err", err)
		}
	}
}

// checkpoint runs one passive checkpoint and returns the WAL's size in
// pages (-1 when another checkpoint was running).
func (c *checkpointer) checkpoint(conn *sql.DB) (frames int, err error) {
	var busy, copied int
	err = conn.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied)
	return frames, err
}

// catchUp finishes the copy while holding the write lock, so the next write
// rewinds the WAL.
func (c *checkpointer) catchUp(conn *sql.DB) error {
	release, err := c.lock.acquire(c.ctx, c.log)
	if err != nil {
		return err
	}
	defer release()
	_, err = c.checkpoint(conn)
	return err
}

// close stops the goroutine and closes its connection. It must run before
// the writer connection closes, so that the writer is the last connection
// and SQLite's final checkpoint on close removes the WAL. Safe to call
// twice.
func (c *checkpointer) close() {
	if c == nil {
		return
	}
	c.stop()
	c.wg.Wait()
}
