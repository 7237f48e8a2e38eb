package supervisor

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// startWatcher watches the stack file's folder and reloads after events on
// the stack file's name have been quiet for ReloadDebounce. The folder, not
// the file: an editor's save replaces the file (write a temp file, rename it
// over), which ends a watch on the file itself.
func (s *Supervisor) startWatcher(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch stack file: %w", err)
	}
	dir, base := filepath.Dir(s.stackFile), filepath.Base(s.stackFile)
	if err := fw.Add(dir); err != nil {
		fw.Close()
		return fmt.Errorf("watch stack file folder %s: %w", dir, err)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer fw.Close()
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case ev, ok := <-fw.Events:
				if !ok {
					return
				}
				// A chmod alone does not change the content.
				if filepath.Base(ev.Name) != base || ev.Op == fsnotify.Chmod {
					continue
				}
				timer.Reset(s.opts.ReloadDebounce)
			case err, ok := <-fw.Errors:
				if !ok {
					return
				}
				s.log.Warn("stack file watcher", keyErr, err)
				timer.Reset(s.opts.ReloadDebounce) // events may be lost: look anyway
			case <-timer.C:
				_, _ = s.Reload(ctx, "stack file changed")
			}
		}
	}()
	return nil
}
