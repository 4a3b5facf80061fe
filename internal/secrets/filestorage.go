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
	"strings"
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
	blobStorage
	files *fileBlobs
}

var _ Storage = (*FileStorage)(nil)

// NewFileStorage returns a FileStorage keeping its files in dir.
func NewFileStorage(dir string) (*FileStorage, error) {
	if dir == "" {
		return nil, fmt.Errorf("secrets file storage: empty directory: %w", errdefs.ErrInvalidArgument)
	}
	f := &fileBlobs{dir: dir, versions: map[string]int64{}}
	return &FileStorage{blobStorage: blobStorage{b: f}, files: f}, nil
}

// LogValue prints the directory only.
func (s *FileStorage) LogValue() slog.Value {
	return slog.StringValue("secrets.FileStorage{" + s.files.dir + "}")
}

// Format prints the directory only, for every verb.
func (s *FileStorage) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "secrets.FileStorage{dir: %q}", s.files.dir)
}

// Tenants reports the tenants the directory has a file for (none if there is no directory).
func (s *FileStorage) Tenants() ([]string, error) {
	ents, err := os.ReadDir(s.files.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		id, err := base64.RawURLEncoding.DecodeString(name)
		if err != nil {
			continue
		}
		out = append(out, string(id))
	}
	return out, nil
}

// tenantBlobs keeps each tenant's data as one serialized blob with a version.
type tenantBlobs interface {
	// load returns the tenant's blob (nil if it has none) and its version.
	load(ctx context.Context, tenantID string) ([]byte, int64, error)
	// save replaces the tenant's blob if its version is still version (0: it has none); ErrConflict
	// otherwise.
	save(ctx context.Context, tenantID string, data []byte, version int64) error
}

// fileBlobs keeps each tenant's blob in a file of its own.
type fileBlobs struct {
	dir string
	// mu serializes the writes; versions counts each tenant's saves since NewFileStorage.
	mu       sync.Mutex
	versions map[string]int64
}

func (f *fileBlobs) path(tenantID string) string {
	return filepath.Join(f.dir, base64.RawURLEncoding.EncodeToString([]byte(tenantID))+".json")
}

func (f *fileBlobs) load(ctx context.Context, tenantID string) ([]byte, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, err := os.ReadFile(f.path(tenantID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, f.versions[tenantID], nil
	}
	return data, f.versions[tenantID], err
}

func (f *fileBlobs) save(ctx context.Context, tenantID string, data []byte, version int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.versions[tenantID] != version {
		return errdefs.ErrConflict
	}
	if err := fsutil.WriteFileAtomic(f.path(tenantID), data, 0o600); err != nil {
		return err
	}
	f.versions[tenantID]++
	return nil
}

// blobStorage is a Storage on tenantBlobs: each change reads the tenant's blob, changes it, and saves it
// if nobody else did meanwhile, else tries again.
type blobStorage struct {
	b tenantBlobs
}

// maxModifyTries bounds the attempts of one change that keeps losing to other writers.
const maxModifyTries = 50

func (s *blobStorage) loadData(ctx context.Context, tenantID string) (*tenantData, int64, error) {
	if err := keys.ValidateTenantID(tenantID); err != nil {
		return nil, 0, err
	}
	data, version, err := s.b.load(ctx, tenantID)
	if err != nil || data == nil {
		return nil, version, err
	}
	var td tenantData
	if err := json.Unmarshal(data, &td); err != nil {
		return nil, 0, fmt.Errorf("read secrets of tenant %s: %w", tenantID, err)
	}
	if td.Secrets == nil {
		td.Secrets = map[string]Record{}
	}
	return &td, version, nil
}

// modify runs fn on tenantID's data (created empty if absent) and saves it if fn succeeds.
func (s *blobStorage) modify(ctx context.Context, tenantID string, fn func(*tenantData) error) error {
	for range maxModifyTries {
		if err := ctx.Err(); err != nil {
			return err
		}
		td, version, err := s.loadData(ctx, tenantID)
		if err != nil {
			return err
		}
		if td == nil {
			td = &tenantData{Secrets: map[string]Record{}}
		}
		if err := fn(td); err != nil {
			return err
		}
		data, err := json.Marshal(td)
		if err != nil {
			return err
		}
		if err := s.b.save(ctx, tenantID, data, version); !errors.Is(err, errdefs.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("the secrets of tenant %s changed %d times while this change was tried: %w", tenantID, maxModifyTries, errdefs.ErrUnavailable)
}

// read runs fn on tenantID's data (nil if absent).
func (s *blobStorage) read(ctx context.Context, tenantID string, fn func(*tenantData) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	td, _, err := s.loadData(ctx, tenantID)
	if err != nil {
		return err
	}
	return fn(td)
}

// GetDataKey implements Storage.
func (s *blobStorage) GetDataKey(ctx context.Context, tenantID string) (k DataKey, err error) {
	err = s.read(ctx, tenantID, func(td *tenantData) error {
		k, err = getDataKey(td, tenantID)
		return err
	})
	return k, err
}

// CreateDataKey implements Storage.
func (s *blobStorage) CreateDataKey(ctx context.Context, k DataKey) error {
	return s.modify(ctx, k.TenantID, func(td *tenantData) error { return createDataKey(td, k) })
}

// ReplaceDataKey implements Storage.
func (s *blobStorage) ReplaceDataKey(ctx context.Context, old, k DataKey) error {
	return s.modify(ctx, k.TenantID, func(td *tenantData) error { return replaceDataKey(td, old, k) })
}

// GetSecret implements Storage.
func (s *blobStorage) GetSecret(ctx context.Context, tenantID, name string) (r Record, err error) {
	err = s.read(ctx, tenantID, func(td *tenantData) error {
		r, err = getSecret(td, tenantID, name)
		return err
	})
	return r, err
}

// CreateSecret implements Storage.
func (s *blobStorage) CreateSecret(ctx context.Context, r Record) error {
	return s.modify(ctx, r.TenantID, func(td *tenantData) error { return createSecret(td, r) })
}

// UpdateSecret implements Storage.
func (s *blobStorage) UpdateSecret(ctx context.Context, r Record) error {
	return s.modify(ctx, r.TenantID, func(td *tenantData) error { return updateSecret(td, r) })
}

// DeleteSecret implements Storage.
func (s *blobStorage) DeleteSecret(ctx context.Context, tenantID, name string) error {
	return s.modify(ctx, tenantID, func(td *tenantData) error { return deleteSecret(td, tenantID, name) })
}

// ListSecrets implements Storage.
func (s *blobStorage) ListSecrets(ctx context.Context, tenantID string) (out []Record, err error) {
	err = s.read(ctx, tenantID, func(td *tenantData) error {
		out = listSecrets(td)
		return nil
	})
	return out, err
}
