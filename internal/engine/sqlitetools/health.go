package sqlitetools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// Health looks at the open store's directory and database file with
// stat(2) only (opening the file would risk SQLite's locks): deleted or
// replaced since the open, a mode the file-mode policy refuses or that
// takes the owner's access away (a mode it only warns about, such as 0750,
// is healthy, as at open), a file cut short of a whole page; and the
// unfinished moves the open left in place.
func (h *handle) Health() string {
	if h.db.Dir == "" {
		return engine.HealthOK
	}
	var probs []string
	di, err := os.Stat(h.b.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "store directory deleted"
	case err != nil:
		return fmt.Sprintf("cannot stat store directory: %v", err)
	case !di.IsDir():
		return "store directory replaced by a file"
	case idOf(di) != h.dirID:
		return "store directory replaced (different inode)"
	}
	if v, msg := sqlstore.DirModeVerdict(h.b.Path, di.Mode()); v == sqlstore.ModeRefuse || v == sqlstore.ModeOwner {
		probs = append(probs, msg)
	}
	fi, err := os.Stat(h.file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		probs = append(probs, "database file deleted")
	case err != nil:
		probs = append(probs, fmt.Sprintf("cannot stat database file: %v", err))
	case idOf(fi) != h.fileID:
		probs = append(probs, "database file replaced (different inode)")
	default:
		if v, msg := sqlstore.FileModeVerdict(h.file, fi.Mode()); v == sqlstore.ModeRefuse || v == sqlstore.ModeOwner {
			probs = append(probs, msg)
		}
		// SQLite only ever writes whole pages, so any other size means
		// the file was cut (reads of the lost pages fail as corrupt).
		if size, page := fi.Size(), h.db.PageSize; page > 0 && (size == 0 || size%page != 0) {
			probs = append(probs, fmt.Sprintf("database file truncated: %d bytes is not a whole number of %d-byte pages; run localcloud check", size, page))
		}
	}
	if h.moves != "" {
		probs = append(probs, h.moves+"; run localcloud check")
	}
	if len(probs) == 0 {
		return engine.HealthOK
	}
	return strings.Join(probs, "; ")
}

// Health is the health of b's store while no up serves it: whether it
// exists, with the modes up keeps, and for a queue the unfinished moves
// out of it that up would leave in place.
func (t Tools) Health(ctx context.Context, env *engine.Env, b config.Binding) string {
	di, err := os.Stat(b.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return "not provisioned; localcloud up creates it"
	}
	if err != nil {
		return fmt.Sprintf("cannot stat store directory: %v", err)
	}
	var probs []string
	if v, msg := sqlstore.DirModeVerdict(b.Path, di.Mode()); v == sqlstore.ModeRefuse || v == sqlstore.ModeOwner {
		probs = append(probs, msg)
	}
	fi, err := os.Stat(File(b))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		probs = append(probs, "no database file; localcloud up creates it")
	case err != nil:
		probs = append(probs, fmt.Sprintf("cannot stat database file: %v", err))
	default:
		if v, msg := sqlstore.FileModeVerdict(File(b), fi.Mode()); v == sqlstore.ModeRefuse || v == sqlstore.ModeOwner {
			probs = append(probs, msg)
		}
		if b.Type == config.TypeQueue && env.Stack != nil {
			probs = append(probs, queueMoveProblems(ctx, env.Stack, b)...)
		}
	}
	if len(probs) == 0 {
		return engine.HealthOK
	}
	return strings.Join(probs, "; ")
}
