package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// RuntimeFileName is the runtime file inside a data dir.
const RuntimeFileName = "runtime.json"

// HealthOK is the health of a binding (or stack) without problems.
const HealthOK = "ok"

// Runtime is the content of <dataDir>/runtime.json. `localcloud up` writes
// it (mode 0600, atomically: a temp file in the data dir renamed over it)
// when it is ready, after every applied or refused reload and after every
// health change (always before the log line that reports the change), and
// removes it when it stops. `localcloud status` and
// `localcloud env` read it, but trust it only while the owner lock is held
// (see [Probe]): a file left by a killed up is stale, and the next up
// overwrites it.
//
//	{
//	  "pid": 4242,
//	  "startedAt": "2026-05-01T10:00:00Z",
//	  "natsUrl": "nats://127.0.0.1:40123",
//	  "explorerUrl": "http://127.0.0.1:4280/",
//	  "stack": "shop",
//	  "stackFile": "/home/me/shop/stack.yaml",
//	  "dataDir": "/home/me/shop/.localcloud",
//	  "health": "ok",
//	  "lastReloadError": "stack.yaml:7:5: bindings.x.type: ...",
//	  "bindings": [
//	    {"name": "carts", "type": "kv", "path": "/home/me/shop/.localcloud/kv/carts",
//	     "durability": "normal", "health": "ok"},
//	    {"name": "orders", "type": "queue", "path": "/home/me/shop/.localcloud/queue/orders",
//	     "subject": "localcloud.shop.orders.available", "visibilityTimeout": "45s",
//	     "visibilityTimeoutMs": 45000, "maxAttempts": 5, "deadLetter": "orders-dlq", "durability": "normal",
//	     "retryDelayMs": 1000, "maxRetryDelayMs": 300000, "dedupWindowMs": 300000,
//	     "health": "store directory deleted; not recreated"}
//	  ]
//	}
//
// explorerUrl is the web explorer's address, left out when the stack turns
// it off. path is the binding's store directory (absolute); subject, the NATS
// subject of its wake-up hints, and visibilityTimeout (a Go duration) with
// visibilityTimeoutMs (the same in whole milliseconds, for readers without
// a Go-duration parser) are set for queues only. health is "ok" or
// the problems found, joined by "; ". The top-level health covers the owner
// lock file. lastReloadError is set while the stack file holds an edit that
// could not be applied (the problems, one per line) and up keeps serving the
// last good stack; it is left out otherwise.
type Runtime struct {
	PID             int              `json:"pid"`
	StartedAt       time.Time        `json:"startedAt"`
	NATSURL         string           `json:"natsUrl"`
	ExplorerURL     string           `json:"explorerUrl,omitempty"`
	SQSEndpoint     string           `json:"sqsEndpoint,omitempty"`
	Stack           string           `json:"stack"`
	StackFile       string           `json:"stackFile"`
	DataDir         string           `json:"dataDir"`
	Health          string           `json:"health"`
	LastReloadError string           `json:"lastReloadError,omitempty"`
	Bindings        []RuntimeBinding `json:"bindings"`
}

// RuntimeBinding is one binding served by up.
type RuntimeBinding struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Engine is "sqlite" or "jetstream"; Path is "" on jetstream, Stream
	// names the binding's stream there and Replicas its replica count.
	Engine            string `json:"engine,omitempty"`
	Path              string `json:"path"`
	Stream            string `json:"stream,omitempty"`
	Replicas          int    `json:"replicas,omitempty"`
	Subject           string `json:"subject,omitempty"`
	VisibilityTimeout string `json:"visibilityTimeout,omitempty"`
	// VisibilityTimeoutMs is VisibilityTimeout in whole milliseconds.
	VisibilityTimeoutMs int64  `json:"visibilityTimeoutMs,omitempty"`
	MaxAttempts         int    `json:"maxAttempts,omitempty"`
	DeadLetter          string `json:"deadLetter,omitempty"`
	// RetryDelayMs, MaxRetryDelayMs and DedupWindowMs are a queue's
	// retryDelay, maxRetryDelay and dedupWindow in milliseconds: with the
	// fields above, every setting a queue is opened with, so commands can
	// work on the stack up serves while the file holds a broken edit.
	RetryDelayMs    int64  `json:"retryDelayMs,omitempty"`
	MaxRetryDelayMs int64  `json:"maxRetryDelayMs,omitempty"`
	DedupWindowMs   int64  `json:"dedupWindowMs,omitempty"`
	Durability      string `json:"durability"`
	Health          string `json:"health"`
	// CreatedBySQS marks a queue the SQS API created (CreateQueue), kept
	// in config.SQSStateFile rather than the stack file.
	CreatedBySQS bool `json:"createdBySqs,omitempty"`
	// SQSName is the name the SQS API shows the queue under, when it is
	// not Name (config.SQSAttrs.Name).
	SQSName string `json:"sqsName,omitempty"`
}

// Binding returns the binding called name.
func (r Runtime) Binding(name string) (RuntimeBinding, bool) {
	for _, b := range r.Bindings {
		if b.Name == name {
			return b, true
		}
	}
	return RuntimeBinding{}, false
}

// ReadRuntime reads <dataDir>/runtime.json. A missing file gives an error
// matching fs.ErrNotExist.
func ReadRuntime(dataDir string) (*Runtime, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, RuntimeFileName))
	if err != nil {
		return nil, fmt.Errorf("read runtime file: %w", err)
	}
	var rt Runtime
	if err := json.Unmarshal(b, &rt); err != nil {
		return nil, fmt.Errorf("read runtime file %s: %w", filepath.Join(dataDir, RuntimeFileName), err)
	}
	return &rt, nil
}

// runtimeTempPattern names the temp files writeRuntime renames into place.
const runtimeTempPattern = ".runtime-*.json.tmp"

// writeRuntime replaces <dataDir>/runtime.json atomically, mode 0600.
func writeRuntime(dataDir string, rt *Runtime) error {
	data, err := json.MarshalIndent(rt, "", "  ")
	if err != nil {
		return fmt.Errorf("write runtime file: %w", err)
	}
	data = append(data, '\n')
	f, err := os.CreateTemp(dataDir, runtimeTempPattern) // mode 0600
	if err != nil {
		return fmt.Errorf("write runtime file: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dataDir, RuntimeFileName))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write runtime file: %w", err)
	}
	return nil
}

// removeRuntime removes runtime.json; a missing one is fine.
func removeRuntime(dataDir string) error {
	err := os.Remove(filepath.Join(dataDir, RuntimeFileName))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove runtime file: %w", err)
	}
	return nil
}

// removeStaleTemps removes temp files a killed up left behind. Only called
// with the owner lock held, so no other writer can be mid-rename.
func removeStaleTemps(dataDir string) {
	matches, _ := filepath.Glob(filepath.Join(dataDir, runtimeTempPattern))
	for _, m := range matches {
		_ = os.Remove(m)
	}
}
