package e2e

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

func TestHotReload(t *testing.T) {
	t.Parallel()
	s := newStack(t, "  carts:\n    type: kv\n  orders:\n    type: queue\n")
	p, _ := s.up(t)
	pid, url := p.pid(), s.runtime(t).NATSURL

	// Add a binding with a plain save.
	mark := p.mark()
	s.write(t, "  carts:\n    type: kv\n  orders:\n    type: queue\n  extra:\n    type: kv\n")
	p.waitLine(mark, eventTimeout, `msg="stack reloaded"`, "added=extra")
	extra := filepath.Join(s.dataDir(), "kv", "extra")
	if m := mode(t, extra); m != 0o700 || !exists(filepath.Join(extra, sqlitekv.FileName)) {
		t.Errorf("extra not provisioned (mode %04o)", m)
	}
	if got := s.runtime(t).names(); got != "carts,extra,orders" {
		t.Errorf("runtime.json bindings %s", got)
	}

	// Remove one: no longer served, files kept.
	mark = p.mark()
	s.write(t, "  carts:\n    type: kv\n  extra:\n    type: kv\n")
	p.waitLine(mark, eventTimeout, `msg="stack reloaded"`, "removed=orders")
	if !exists(filepath.Join(s.dataDir(), "queue", "orders", sqlitequeue.FileName)) {
		t.Error("the removed binding's files were deleted")
	}
	if got := s.runtime(t).names(); got != "carts,extra" {
		t.Errorf("runtime.json bindings %s", got)
	}

	// An invalid edit: every problem logged, the last good stack kept.
	mark = p.mark()
	writeRaw(t, s.file, "version: 1\nname: shop\nnotify:\n  listen: 127.0.0.1:0\nbindings:\n  carts:\n    type: kv\n  broken:\n    type: nope\n  worse:\n    tipe: kv\n")
	p.waitLine(mark, eventTimeout, "keeping the last good stack", "problems=3")
	p.waitLine(mark, eventTimeout, "stack file problem", s.file+":9:11:")
	p.waitLine(mark, eventTimeout, "stack file problem", s.file+":11:5:")
	rt := s.runtime(t)
	if rt.names() != "carts,extra" || rt.LastReloadError == "" {
		t.Errorf("after an invalid edit runtime.json = %+v", rt)
	}
	if st := s.status(t); !st.Running || st.LastError == "" {
		t.Errorf("status after an invalid edit = %+v", st)
	}

	// An editor-style replace (temp file renamed over the stack file).
	mark = p.mark()
	s.replace(t, "  carts:\n    type: kv\n  extra:\n    type: kv\n  fresh:\n    type: queue\n    visibilityTimeout: 1m\n")
	p.waitLine(mark, eventTimeout, `msg="stack reloaded"`, "added=fresh")
	rt = s.runtime(t)
	if rt.names() != "carts,extra,fresh" || rt.LastReloadError != "" {
		t.Errorf("after the replace runtime.json = %+v", rt)
	}
	// And a second replace: the watch survived the first.
	mark = p.mark()
	s.replace(t, "  carts:\n    type: kv\n  fresh:\n    type: queue\n    visibilityTimeout: 2m\n")
	p.waitLine(mark, eventTimeout, `msg="stack reloaded"`, "removed=extra", "updated=fresh")

	// SIGHUP re-reads the file.
	mark = p.mark()
	p.signal(syscall.SIGHUP)
	p.waitLine(mark, eventTimeout, "reason=SIGHUP")

	// NATS and the process stayed the same throughout.
	if rt := s.runtime(t); rt.PID != pid || rt.NATSURL != url {
		t.Errorf("up restarted: %+v", rt)
	}
	p.signal(syscall.SIGTERM)
	if code := p.waitExit(stopLimit); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(p.stderr(), "msg=stopped") {
		t.Error("no stopped line")
	}
}
