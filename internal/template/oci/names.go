package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/fsutil"
)

// A name points at an image digest: Dir/names/<name> holds the digest. Re-pointing a name changes what
// new sandboxes of that name boot, never a sandbox or snapshot that recorded the digest.

// nameRE is the form of a template name: lower-case, like an image repository's last part.
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// CheckName reports whether name can name a template.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("template name %q: want 1 to 63 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit: %w", name, errdefs.ErrInvalidArgument)
	}
	return nil
}

// CheckDigest reports whether digest is of the form the store names images by ("sha256:<64 hex>").
func CheckDigest(digest string) error {
	if !digestRE.MatchString(digest) {
		return fmt.Errorf("image digest %q: want sha256:<64 lower-case hex>: %w", digest, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Tag points name at the image of digest, which the store must hold.
func (s *Store) Tag(name, digest string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if _, err := s.Get(digest); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	dir := filepath.Join(s.Dir, "names")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, name), []byte(digest+"\n"), 0o600)
}

// Resolve returns the digest name points at (errdefs.ErrNotFound if it points nowhere).
func (s *Store) Resolve(name string) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(s.Dir, "names", name))
	if err != nil {
		return "", fmt.Errorf("template %q: %w", name, notFound(err))
	}
	digest := strings.TrimSpace(string(b))
	if err := CheckDigest(digest); err != nil {
		return "", fmt.Errorf("template %q: %w", name, err)
	}
	return digest, nil
}

// Names returns every name and the digest it points at.
func (s *Store) Names() (map[string]string, error) {
	entries, err := os.ReadDir(filepath.Join(s.Dir, "names"))
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		if !e.Type().IsRegular() || CheckName(e.Name()) != nil {
			continue // a write's temporary file
		}
		if d, err := s.Resolve(e.Name()); err == nil {
			out[e.Name()] = d
		}
	}
	return out, nil
}

// Untag removes name (errdefs.ErrNotFound if there is none). The image stays.
func (s *Store) Untag(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.Remove(filepath.Join(s.Dir, "names", name)); err != nil {
		return fmt.Errorf("template %q: %w", name, notFound(err))
	}
	return nil
}
