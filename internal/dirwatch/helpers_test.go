package dirwatch

import "time"

// waitTimeout is the generous deadline of every wait in these tests: long enough for a loaded
// 2-core machine, and only ever reached when something is broken.
const waitTimeout = 20 * time.Second
