package supervisor

import (
	"context"
	"errors"
	"fmt"
	"github.com/localcloud/localcloud/internal/sqlstore"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Modes every store is created with: the file-mode policy's constants
// (sqlstore.StoreDirMode, sqlstore.StoreFileMode). What a looser mode means
// is the policy's too (sqlstore.DirModeVerdict): only modes it refuses, or
// that take the owner's access away, are health problems; a mode it only
// warns about (group or others may read, like 0750) is healthy, as at open.
const (
	DirMode  = sqlstore.StoreDirMode
	FileMode = sqlstore.StoreFileMode
)

// HealthAdvice is what to do about a deleted or replaced store; up logs it
// with the problem, status prints it under the table.
const HealthAdvice = "localcloud up never recreates a deleted or replaced store: restore it, or remove the binding from the stack and restart up"

// check looks at the store's directory and database file with stat(2) only
// (opening the file would risk SQLite's locks) and returns HealthOK or the
// problems found.
func (s *store) check() string {
	if s.js != nil {
		if st := s.js.Status(); st != nats.CONNECTED {
			return fmt.Sprintf("not connected to JetStream (connection %s); it reconnects on its own", strings.ToLower(st.String()))
		}
		return HealthOK
	}
	var probs []string
	di, err := os.Stat(s.cfg.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "store directory deleted"
	case err != nil:
		return fmt.Sprintf("cannot stat store directory: %v", err)
	case !di.IsDir():
		return "store directory replaced by a file"
	case idOf(di) != s.dirID:
		return "store directory replaced (different inode)"
	}
	if v, msg := sqlstore.DirModeVerdict(s.cfg.Path, di.Mode()); v == sqlstore.ModeRefuse || v == sqlstore.ModeOwner {
		probs = append(probs, msg)
	}
	fi, err := os.Stat(s.file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		probs = append(probs, "database file deleted")
	case err != nil:
		probs = append(probs, fmt.Sprintf("cannot stat database file: %v", err))
	case idOf(fi) != s.fileID:
		probs = append(probs, "database file replaced (different inode)")
	default:
		if v, msg := sqlstore.FileModeVerdict(s.file, fi.Mode()); v == sqlstore.ModeRefuse || v == sqlstore.ModeOwner {
			probs = append(probs, msg)
		}
		// SQLite only ever writes whole pages, so any other size means
		// the file was cut (reads of the lost pages fail as corrupt).
		if size := fi.Size(); s.pageSize > 0 && (size == 0 || size%s.pageSize != 0) {
			probs = append(probs, fmt.Sprintf("database file truncated: %d bytes is not a whole number of %d-byte pages; run localcloud check", size, s.pageSize))
		}
	}
	if s.moves != "" {
		probs = append(probs, s.moves+"; run localcloud check")
	}
	if len(probs) == 0 {
		return HealthOK
	}
	return strings.Join(probs, "; ")
}

// CheckHealth checks every store and the owner lock now, logs what changed
// since the last check and updates runtime.json if anything did.
func (s *Supervisor) CheckHealth() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.checkHealthLocked(true)
}

// checkHealthLocked runs the checks; with write it also rewrites
// runtime.json when a health changed (or when the last write failed).
//
// The log lines come after the write, so whoever sees one finds
// runtime.json updated.
func (s *Supervisor) checkHealthLocked(write bool) {
	var logs []func()
	for _, b := range s.stack.Bindings {
		x := s.stores[b.Name]
		if x == nil {
			continue
		}
		h := x.check()
		if h == x.health {
			continue
		}
		name, path := b.Name, b.Path
		if h == HealthOK {
			logs = append(logs, func() { s.log.Info("binding healthy again", keyBinding, name, keyPath, path) })
		} else {
			logs = append(logs, func() {
				s.log.Warn("binding unhealthy", keyBinding, name, keyPath, path, keyProblem, h, "advice", HealthAdvice)
			})
		}
		x.health = h
	}
	h := HealthOK
	if p := s.lock.check(); p != "" {
		h = p
	}
	if h != s.health {
		if h == HealthOK {
			logs = append(logs, func() { s.log.Info("owner lock file healthy again", keyPath, s.lock.path) })
		} else {
			logs = append(logs, func() { s.log.Warn("owner lock file lost", keyPath, s.lock.path, keyProblem, h) })
		}
		s.health = h
	}
	if write && (len(logs) > 0 || s.writeFailing) {
		_ = s.writeRuntimeLocked()
	}
	for _, l := range logs {
		l()
	}
}

func (s *Supervisor) healthLoop(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.CheckHealth()
		}
	}
}
