package supervisor

import (
	"os"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
)

// TestHealthReportsATruncatedFile: a database file cut mid-page while up
// runs is reported (SQLite only ever writes whole pages), and the report
// goes once the file is whole again.
func TestHealthReportsATruncatedFile(t *testing.T) {
	t.Parallel()
	s, _, logs := start(t, stackText("  orders:\n    type: queue"), Options{NoWatch: true})
	defer s.Close()
	orders, _ := s.Stack().Binding("orders")
	file := dbFile(*orders)
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(file, fi.Size()-100); err != nil {
		t.Fatal(err)
	}
	s.CheckHealth()
	b, _ := s.Runtime().Binding("orders")
	if !strings.Contains(b.Health, "database file truncated") || !strings.Contains(b.Health, "4096-byte pages") {
		t.Errorf("health of a file cut mid-page = %q", b.Health)
	}
	if !strings.Contains(logs.String(), "binding unhealthy") {
		t.Errorf("no unhealthy line:\n%s", logs)
	}
	if err := os.Truncate(file, fi.Size()); err != nil {
		t.Fatal(err)
	}
	s.CheckHealth()
	if b, _ := s.Runtime().Binding("orders"); b.Health != HealthOK {
		t.Errorf("health after the file is whole again = %q", b.Health)
	}
}

// dbFile returns the database file of a binding of an engine that keeps
// one (engine.Place).
func dbFile(b config.Binding) string {
	t, err := engine.For(b)
	if err != nil {
		return ""
	}
	return t.Place(b).File
}
