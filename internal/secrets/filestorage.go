package secrets

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/fsutil"
	"github.com/airlockrun/airlock/internal/keys"
)

// FileStorage is a Storage in a directory: one JSON file per tenant (named by the base64url of the
// tenant ID), mode 0600 in a 0700 directory, each write atomic (temporary file, sync, rename). The
// directory is created on the first write. One FileStorage owns its directory: two processes must
// not share one.
type FileStorage struct {
	dir string
	// mu serializes every read-modify-write of the tenant files.
	mu sync.Mutex
}

var _ Storage = (*FileStorage)(nil)

// NewFileStorage returns a FileStorage keeping its files in dir.
func NewFileStorage(dir string) (*FileStorage, error) {
	if dir == "" {
		return nil, fmt.Errorf("secrets file storage: empty directory: %w", errdefs.ErrInvalidArgument)
	}
	return &FileStorage{dir: dir}, nil
}

// LogValue prints the directory only.
func (s *FileStorage) LogValue() slog.Value {
	return slog.StringValue("secrets.FileStorage{" + s.dir + "}")
}

// Format prints the directory only, for every verb.
func (s *FileStorage) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "secrets.FileStorage{dir: %q}", s.dir)
}

func (s *FileStorage) path(tenantID string) string {
	return filepath.Join(s.dir, base64.RawURLEncoding.EncodeToString([]byte(tenantID))+".json")
}

// load reads tenantID's file; nil if there is none.
func (s *FileStorage) loadLocked(tenantID string) (*tenantData, error) {
	if err := keys.ValidateTenantID(tenantID); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(s.path(tenantID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var td tenantData
	if err := json.Unmarshal(data, &td); err != nil {
		return nil, fmt.Errorf("read secrets of tenant %s: %w", tenantID, err)
	}
	if td.Secrets == nil {
		td.Secrets = map[string]Record{}
	}
	return &td, nil
}

func (s *FileStorage) saveLocked(tenantID string, td *tenantData) error {
	data, err := json.Marshal(td)
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(s.path(tenantID), data, 0o600)
}

// modify runs fn on tenantID's data (created empty if absent) and saves it if fn succeeds.
func (s *FileStorage) modify(ctx context.Context, tenantID string, fn func(*tenantData) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	td, err := s.loadLocked(tenantID)
	if err != nil {
		return err
	}
	if td == nil {
		td = &tenantData{Secrets: map[string]Record{}}
	}
	if err := fn(td); err != nil {
		return err
	}
	return s.saveLocked(tenantID, td)
}

// read runs fn on tenantID's data (nil if absent).
func (s *FileStorage) read(ctx context.Context, tenantID string, fn func(*tenantData) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	td, err := s.loadLocked(tenantID)
	if err != nil {
		return err
	}
	return fn(td)
}

// GetDataKey implements Storage.
func (s *FileStorage) GetDataKey(ctx context.Context, tenantID string) (k DataKey, err error) {
	err = s.read(ctx, tenantID, func(td *tenantData) error {
		k, err = getDataKey(td, tenantID)
		return err
	})
	return k, err
}

// CreateDataKey implements Storage.
func (s *FileStorage) CreateDataKey(ctx context.Context, k DataKey) error {
	return s.modify(ctx, k.TenantID, func(td *tenantData) error { return createDataKey(td, k) })
}

// ReplaceDataKey implements Storage.
func (s *FileStorage) ReplaceDataKey(ctx context.Context, old, k DataKey) error {
	return s.modify(ctx, k.TenantID, func(td *tenantData) error { return replaceDataKey(td, old, k) })
}

// GetSecret implements Storage.
func (s *FileStorage) GetSecret(ctx context.Context, tenantID, name string) (r Record, err error) {
	err = s.read(ctx, tenantID, func(td *tenantData) error {
		r, err = getSecret(td, tenantID, name)
		return err
	})
	return r, err
}

// CreateSecret implements Storage.
func (s *FileStorage) CreateSecret(ctx context.Context, r Record) error {
	return s.modify(ctx, r.TenantID, func(td *tenantData) error { return createSecret(td, r) })
}

// UpdateSecret implements Storage.
func (s *FileStorage) UpdateSecret(ctx context.Context, r Record) error {
	return s.modify(ctx, r.TenantID, func(td *tenantData) error { return updateSecret(td, r) })
}

// DeleteSecret implements Storage.
func (s *FileStorage) DeleteSecret(ctx context.Context, tenantID, name string) error {
	return s.modify(ctx, tenantID, func(td *tenantData) error { return deleteSecret(td, tenantID, name) })
}

// ListSecrets implements Storage.
func (s *FileStorage) ListSecrets(ctx context.Context, tenantID string) (out []Record, err error) {
	err = s.read(ctx, tenantID, func(td *tenantData) error {
		out = listSecrets(td)
		return nil
	})
	return out, err
}
