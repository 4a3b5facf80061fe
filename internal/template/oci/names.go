package oci

import (
	"fmt"
	"regexp"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Templates are named by the control plane, which records which digest a name points at (re-pointing a
// name changes what new sandboxes of that name boot, never a sandbox or snapshot that recorded the
// digest); the store keeps images by digest only. These check the two parts of a reference.

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
