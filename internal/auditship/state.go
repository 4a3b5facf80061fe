package auditship

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// State is what a shipper remembers between runs: the last entry a destination took.
type State struct {
	// Tenant is the log's tenant ("" if the entries named none).
	Tenant string `json:"tenant"`
	// Seq and Hash are the last delivered entry's.
	Seq  int64  `json:"seq"`
	Hash string `json:"hash"`
}

// ReadState reads a state file. It reports ok false, and no error, if there is no file at path.
func ReadState(path string) (st State, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("read state file: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil || st.Seq < 0 {
		return State{}, false, fmt.Errorf("state file %s is not a shipper's state (want {\"tenant\":…,\"seq\":N,\"hash\":…}): %w", path, errdefs.ErrInvalidArgument)
	}
	return st, true, nil
}

// WriteState replaces the state file at path with st, atomically: a reader (or a restart after a
// crash) finds the old state or the new one, whole. The file is created 0600 and synced, and so is its
// directory after the rename.
func WriteState(path string, st State) (err error) {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("write state file: %w", err)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*") // 0600
	if err != nil {
		return fmt.Errorf("write state file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}()
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write state file: %w", err)
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
