package sqlstore_test

import (
	"io/fs"
	"testing"

	"github.com/localcloud/localcloud/internal/sqlstore"
)

// TestModePolicy pins the one file-mode policy that open, up's health check,
// status and check share.
func TestModePolicy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		perm     fs.FileMode
		dir, fil sqlstore.ModeVerdict
	}{
		{0o700, sqlstore.ModeOK, 0},
		{0o600, sqlstore.ModeOwner, sqlstore.ModeOK},
		{0o750, sqlstore.ModeWarn, 0},
		{0o755, sqlstore.ModeWarn, 0},
		{0o644, 0, sqlstore.ModeWarn},
		{0o640, 0, sqlstore.ModeWarn},
		{0o770, sqlstore.ModeRefuse, 0},
		{0o702, sqlstore.ModeRefuse, sqlstore.ModeRefuse},
		{0o664, 0, sqlstore.ModeRefuse},
		{0o620, 0, sqlstore.ModeRefuse},
		{0o500, sqlstore.ModeOwner, 0},
		{0o400, 0, sqlstore.ModeOwner},
	} {
		// 0 in a column: that mode is not a case for that kind.
		if c.dir != 0 || c.perm == 0o700 {
			if d, msg := sqlstore.DirModeVerdict("/s", c.perm); d != c.dir || (d == sqlstore.ModeOK) != (msg == "") {
				t.Errorf("dir %04o: verdict %d (%q), want %d", c.perm, d, msg, c.dir)
			}
		}
		if c.fil != 0 || c.perm == 0o600 {
			if f, msg := sqlstore.FileModeVerdict("/s/f", c.perm); f != c.fil || (f == sqlstore.ModeOK) != (msg == "") {
				t.Errorf("file %04o: verdict %d (%q), want %d", c.perm, f, msg, c.fil)
			}
		}
	}
	if sqlstore.StoreDirMode != 0o700 || sqlstore.StoreFileMode != 0o600 {
		t.Errorf("store modes %04o %04o, want 0700 0600", sqlstore.StoreDirMode, sqlstore.StoreFileMode)
	}
}
