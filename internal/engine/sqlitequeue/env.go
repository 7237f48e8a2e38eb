package sqlitequeue

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// envBinding is what the engine reads of a local-queue binding's JSON
// (queue.EnvBinding; package queue reads the queue settings beside it):
// where the store is and where its dead letters go.
type envBinding struct {
	QueuePath  string `json:"queuePath"`
	DeadLetter *struct {
		QueuePath string `json:"queuePath"`
	} `json:"deadLetter"`
}

// bindingConfig fills in cfg's location, and its dead-letter queue's when
// its policy has none, from cfg.Binding, the JSON queue.FromEnv found.
func bindingConfig(cfg driver.Config) (driver.Config, error) {
	var b envBinding
	if err := json.Unmarshal(cfg.Binding, &b); err != nil {
		return cfg, bindings.Wrap(bindings.CodeBindingSetupFailed, err, "decode the binding's JSON")
	}
	switch {
	case b.QueuePath == "":
		return cfg, bindings.Errorf(bindings.CodeBindingSetupFailed, "queuePath is missing")
	case !filepath.IsAbs(b.QueuePath):
		return cfg, bindings.Errorf(bindings.CodeBindingSetupFailed, "queuePath must be an absolute path, got %q", b.QueuePath)
	case b.DeadLetter != nil && !filepath.IsAbs(b.DeadLetter.QueuePath):
		return cfg, bindings.Errorf(bindings.CodeBindingSetupFailed, "deadLetter.queuePath must be an absolute path, got %q", b.DeadLetter.QueuePath)
	}
	cfg.Location = b.QueuePath
	if cfg.DeadLetter.MaxAttempts > 0 && cfg.DeadLetter.Location == "" {
		if b.DeadLetter == nil {
			return cfg, bindings.Errorf(bindings.CodeBindingSetupFailed,
				"maxAttempts needs deadLetter.queuePath: a message past maxAttempts must have somewhere to go")
		}
		cfg.DeadLetter.Location = b.DeadLetter.QueuePath
	}
	return cfg, nil
}

// needStores fails, wrapping bindings.ErrNoStore, when the store at loc or
// its dead-letter queue dlq ("" for none) has no database file: a handle
// with NoCreate creates neither. A store in memory is no provisioned store:
// it is opened as always.
func needStores(loc, dlq string) error {
	for _, s := range []struct{ what, loc string }{{"queue", loc}, {"dead-letter queue", dlq}} {
		if s.loc == "" || strings.HasPrefix(s.loc, MemoryPrefix) {
			continue
		}
		file := filepath.Join(s.loc, FileName)
		_, err := os.Stat(file)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return &bindings.Error{Code: bindings.CodeBindingSetupFailed, Err: bindings.ErrNoStore,
				Msg: fmt.Sprintf("the %s store %s does not exist", s.what, file)}
		case err != nil:
			return bindings.Wrap(bindings.CodeBindingSetupFailed, err, "look for the %s store %s", s.what, file)
		}
	}
	return nil
}
