package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/config"
)

func TestQueueRetryAndDedupSettings(t *testing.T) {
	dir := t.TempDir()
	src := "version: 1\nname: shop\nbindings:\n  jobs:\n    type: queue\n    retryDelay: 200ms\n    maxRetryDelay: 0s\n    dedupWindow: 2s\n"
	s, err := config.Parse(strings.NewReader(src), "stack.yaml", dir)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.Binding("jobs")
	if b.RetryDelay != 200*time.Millisecond || b.MaxRetryDelay != 0 || b.DedupWindow != 2*time.Second {
		t.Fatalf("binding %+v", b)
	}
	for body, want := range map[string]string{
		"    type: queue\n    retryDelay: 13h\n": `stack.yaml:6:17: bindings.jobs.retryDelay: must be a duration between 0s and 12h, got "13h"`,
		"    type: queue\n    retryDelay: 200\n": `stack.yaml:6:17: bindings.jobs.retryDelay: must be a duration between 0s and 12h, got 200: add a unit, e.g. 200ms`,
		"    type: queue\n    dedupWindow: 0s\n": `stack.yaml:6:18: bindings.jobs.dedupWindow: must be a duration between 1ms and 168h, got "0s"`,
		"    type: kv\n    maxRetryDelay: 1m\n":  `bindings.jobs.maxRetryDelay: only queue bindings have maxRetryDelay; jobs is a kv binding`,
	} {
		_, err := config.Parse(strings.NewReader("version: 1\nname: shop\nbindings:\n  jobs:\n"+body), "stack.yaml", dir)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v\nwant %s", body, err, want)
		}
	}
}
