// Package dirwatch watches store directories with inotify (fsnotify) and reports writes to the
// database files, for writers that do not publish hints (another process, another tool). Events
// are coalesced per directory with the same leading-edge-plus-trailing rule as notify.Publisher.
//
// Only `up` (through internal/hintsrc) imports it, so apps never link fsnotify.
package dirwatch

import "errors"

// ErrClosed means the DirWatcher was already closed.
var ErrClosed = errors.New("closed")
