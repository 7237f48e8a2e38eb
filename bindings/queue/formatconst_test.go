package queue_test

import (
	"testing"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

// TestDeprecatedFormatConstantsMatchTheEngine: the public copies of the
// SQLite engine's format constants (kept for existing callers; go doc must
// not name the internal package, so they cannot be written as references)
// say what the engine really creates.
func TestDeprecatedFormatConstantsMatchTheEngine(t *testing.T) {
	for _, c := range []struct{ name, public, engine string }{
		{"FileName", queue.FileName, sqlitequeue.FileName},
		{"Marker", queue.Marker, sqlitequeue.Marker},
		{"Schema", queue.Schema, sqlitequeue.Schema},
		{"OrderIndex", queue.OrderIndex, sqlitequeue.OrderIndex},
		{"MovesDDL", queue.MovesDDL, sqlitequeue.MovesDDL},
	} {
		if c.public != c.engine {
			t.Errorf("queue.%s differs from the engine's:\n%s\nwant:\n%s", c.name, c.public, c.engine)
		}
	}
}
