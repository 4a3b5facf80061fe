package secrets

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// DocStorage is a Storage in the Store's documents: one per tenant, named by a prefix and the tenant ID,
// holding what FileStorage keeps in the tenant's file (ciphertext and the wrapped data key only). Every
// control-plane replica on one Store sees the same secrets; concurrent changes are compare-and-swap on
// the document's version.
type DocStorage struct {
	blobStorage
	docs *docBlobs
}

var _ Storage = (*DocStorage)(nil)

// NewDocStorage returns a DocStorage keeping its documents in docs under prefix (e.g. "secrets/"), which
// must be a valid document key.
func NewDocStorage(docs store.Docs, prefix string) (*DocStorage, error) {
	if err := store.CheckDocKey(prefix); err != nil {
		return nil, fmt.Errorf("secrets document storage: prefix: %w", err)
	}
	d := &docBlobs{docs: docs, prefix: prefix}
	return &DocStorage{blobStorage: blobStorage{b: d}, docs: d}, nil
}

// LogValue prints the prefix only.
func (s *DocStorage) LogValue() slog.Value {
	return slog.StringValue("secrets.DocStorage{" + s.docs.prefix + "}")
}

// Format prints the prefix only, for every verb.
func (s *DocStorage) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "secrets.DocStorage{prefix: %q}", s.docs.prefix)
}

type docBlobs struct {
	docs   store.Docs
	prefix string
}

func (d *docBlobs) key(tenantID string) string { return d.prefix + store.DocKeyPart(tenantID) }

func (d *docBlobs) load(ctx context.Context, tenantID string) ([]byte, int64, error) {
	doc, err := d.docs.GetDoc(ctx, d.key(tenantID))
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	return doc.Value, doc.Version, nil
}

func (d *docBlobs) save(ctx context.Context, tenantID string, data []byte, version int64) error {
	_, err := d.docs.PutDoc(ctx, store.Doc{Key: d.key(tenantID), Value: data, Version: version})
	if errors.Is(err, errdefs.ErrAlreadyExists) || errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("%w: %w", err, errdefs.ErrConflict) // another writer made or removed it
	}
	return err
}

// ImportFiles moves what a FileStorage holds into s, for a server that used to keep these records in
// files: each tenant s has nothing for gets its file's records, and the file is removed. A tenant s has
// records for already keeps them, and its file stays where it is; ImportFiles reports those tenants.
func ImportFiles(ctx context.Context, from *FileStorage, to *DocStorage) (moved int, skipped []string, err error) {
	tenants, err := from.Tenants()
	if err != nil {
		return 0, nil, err
	}
	for _, tenant := range tenants {
		data, _, err := from.files.load(ctx, tenant)
		if err != nil {
			return moved, skipped, fmt.Errorf("import the records of tenant %s: %w", tenant, err)
		}
		if data == nil {
			continue
		}
		err = to.b.save(ctx, tenant, data, 0)
		switch {
		case errors.Is(err, errdefs.ErrConflict):
			skipped = append(skipped, tenant)
			continue
		case err != nil:
			return moved, skipped, fmt.Errorf("import the records of tenant %s: %w", tenant, err)
		}
		if err := os.Remove(from.files.path(tenant)); err != nil {
			return moved, skipped, fmt.Errorf("remove the imported file of tenant %s: %w", tenant, err)
		}
		moved++
	}
	return moved, skipped, nil
}
