package supervisor

// The engines up and the CLI know, linked in here as database/sql drivers
// are: each registers its engine.Tools. The rest of the supervisor, the
// CLI and the explorer reach them only through package engine.
import (
	_ "github.com/localcloud/localcloud/internal/engine/jstools"
	_ "github.com/localcloud/localcloud/internal/engine/sqlitetools"
)
