package kv_test

import (
	"testing"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
)

// TestDeprecatedFormatConstantsMatchTheEngine: the public copies of the
// SQLite engine's format constants say what the engine really creates.
func TestDeprecatedFormatConstantsMatchTheEngine(t *testing.T) {
	for _, c := range []struct{ name, public, engine string }{
		{"FileName", kv.FileName, sqlitekv.FileName},
		{"Marker", kv.Marker, sqlitekv.Marker},
		{"Schema", kv.Schema, sqlitekv.Schema},
	} {
		if c.public != c.engine {
			t.Errorf("kv.%s differs from the engine's:\n%s\nwant:\n%s", c.name, c.public, c.engine)
		}
	}
}
