package secrets

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// MemStorage is a Storage in memory, for tests. The zero value is not usable; call NewMemStorage.
type MemStorage struct {
	mu sync.Mutex
	// tenants holds each tenant's data key and records.
	tenants map[string]*tenantData
}

type tenantData struct {
	DataKey *DataKey          `json:"data_key,omitempty"`
	Secrets map[string]Record `json:"secrets"`
}

var _ Storage = (*MemStorage)(nil)

// NewMemStorage returns an empty MemStorage.
func NewMemStorage() *MemStorage { return &MemStorage{tenants: map[string]*tenantData{}} }

// LogValue prints nothing of the stored data.
func (m *MemStorage) LogValue() slog.Value { return slog.StringValue("secrets.MemStorage{REDACTED}") }

// Format prints nothing of the stored data, for every verb.
func (m *MemStorage) Format(f fmt.State, _ rune) { fmt.Fprint(f, "secrets.MemStorage{REDACTED}") }

func (m *MemStorage) tenantLocked(tenantID string, create bool) *tenantData {
	td := m.tenants[tenantID]
	if td == nil && create {
		td = &tenantData{Secrets: map[string]Record{}}
		m.tenants[tenantID] = td
	}
	return td
}

// GetDataKey implements Storage.
func (m *MemStorage) GetDataKey(ctx context.Context, tenantID string) (DataKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return getDataKey(m.tenantLocked(tenantID, false), tenantID)
}

// CreateDataKey implements Storage.
func (m *MemStorage) CreateDataKey(ctx context.Context, k DataKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return createDataKey(m.tenantLocked(k.TenantID, true), k)
}

// ReplaceDataKey implements Storage.
func (m *MemStorage) ReplaceDataKey(ctx context.Context, old, k DataKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return replaceDataKey(m.tenantLocked(k.TenantID, false), old, k)
}

// GetSecret implements Storage.
func (m *MemStorage) GetSecret(ctx context.Context, tenantID, name string) (Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return getSecret(m.tenantLocked(tenantID, false), tenantID, name)
}

// CreateSecret implements Storage.
func (m *MemStorage) CreateSecret(ctx context.Context, r Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return createSecret(m.tenantLocked(r.TenantID, true), r)
}

// UpdateSecret implements Storage.
func (m *MemStorage) UpdateSecret(ctx context.Context, r Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return updateSecret(m.tenantLocked(r.TenantID, false), r)
}

// DeleteSecret implements Storage.
func (m *MemStorage) DeleteSecret(ctx context.Context, tenantID, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return deleteSecret(m.tenantLocked(tenantID, false), tenantID, name)
}

// ListSecrets implements Storage.
func (m *MemStorage) ListSecrets(ctx context.Context, tenantID string) ([]Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return listSecrets(m.tenantLocked(tenantID, false)), nil
}

// The helpers below are shared by MemStorage and FileStorage; td may be nil (an unknown tenant).

func getDataKey(td *tenantData, tenantID string) (DataKey, error) {
	if td == nil || td.DataKey == nil {
		return DataKey{}, fmt.Errorf("data key of tenant %s: %w", tenantID, errdefs.ErrNotFound)
	}
	return td.DataKey.clone(), nil
}

func createDataKey(td *tenantData, k DataKey) error {
	if td.DataKey != nil {
		return fmt.Errorf("data key of tenant %s: %w", k.TenantID, errdefs.ErrAlreadyExists)
	}
	c := k.clone()
	td.DataKey = &c
	return nil
}

func replaceDataKey(td *tenantData, old, k DataKey) error {
	if td == nil || td.DataKey == nil {
		return fmt.Errorf("data key of tenant %s: %w", k.TenantID, errdefs.ErrNotFound)
	}
	if td.DataKey.KeyID != old.KeyID || !bytes.Equal(td.DataKey.Wrapped, old.Wrapped) {
		return fmt.Errorf("data key of tenant %s changed meanwhile: %w", k.TenantID, errdefs.ErrConflict)
	}
	c := k.clone()
	td.DataKey = &c
	return nil
}

func getSecret(td *tenantData, tenantID, name string) (Record, error) {
	r, ok := Record{}, false
	if td != nil {
		r, ok = td.Secrets[name]
	}
	if !ok {
		return Record{}, fmt.Errorf("secret %s of tenant %s: %w", name, tenantID, errdefs.ErrNotFound)
	}
	return r.clone(), nil
}

func createSecret(td *tenantData, r Record) error {
	if _, ok := td.Secrets[r.Name]; ok {
		return fmt.Errorf("secret %s of tenant %s: %w", r.Name, r.TenantID, errdefs.ErrAlreadyExists)
	}
	td.Secrets[r.Name] = r.clone()
	return nil
}

func updateSecret(td *tenantData, r Record) error {
	old, err := getSecret(td, r.TenantID, r.Name)
	if err != nil {
		return err
	}
	if r.Version != old.Version+1 {
		return fmt.Errorf("secret %s of tenant %s is at version %d, not %d: %w", r.Name, r.TenantID, old.Version, r.Version-1, errdefs.ErrConflict)
	}
	td.Secrets[r.Name] = r.clone()
	return nil
}

func deleteSecret(td *tenantData, tenantID, name string) error {
	if _, err := getSecret(td, tenantID, name); err != nil {
		return err
	}
	delete(td.Secrets, name)
	return nil
}

func listSecrets(td *tenantData) []Record {
	out := []Record{}
	if td == nil {
		return out
	}
	for _, r := range td.Secrets {
		out = append(out, r.clone())
	}
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.Name, b.Name) })
	return out
}
