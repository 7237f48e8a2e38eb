package sqlitekv

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv/driver"
)

// bindingConfig fills in cfg's location from cfg.Binding, the JSON of a
// local-kv binding (kv.EnvBinding) kv.FromEnv found: its dataDir.
func bindingConfig(cfg driver.Config) (driver.Config, error) {
	var b struct {
		DataDir string `json:"dataDir"`
	}
	if err := json.Unmarshal(cfg.Binding, &b); err != nil {
		return cfg, bindings.Wrap(bindings.CodeBindingSetupFailed, err, "decode the binding's JSON")
	}
	switch {
	case b.DataDir == "":
		return cfg, bindings.Errorf(bindings.CodeBindingSetupFailed, "dataDir is missing")
	case !filepath.IsAbs(b.DataDir):
		return cfg, bindings.Errorf(bindings.CodeBindingSetupFailed, "dataDir must be an absolute path, got %q", b.DataDir)
	}
	cfg.Location = b.DataDir
	return cfg, nil
}

// needStore fails, wrapping bindings.ErrNoStore, when the store at loc has
// no database file: a handle with NoCreate creates none. A store in memory
// is no provisioned store: it is opened as always.
func needStore(loc string) error {
	if strings.HasPrefix(loc, MemoryPrefix) {
		return nil
	}
	file := filepath.Join(loc, FileName)
	_, err := os.Stat(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &bindings.Error{Code: bindings.CodeBindingSetupFailed, Err: bindings.ErrNoStore,
			Msg: fmt.Sprintf("the KV store %s does not exist", file)}
	case err != nil:
		return bindings.Wrap(bindings.CodeBindingSetupFailed, err, "look for the KV store %s", file)
	}
	return nil
}
