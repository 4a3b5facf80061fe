package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/template"
)

// The default template is an image: scripts/install.sh builds it (mmdebstrap, from Debian's packages)
// into an OCI archive, and a server installs it at start (InstallDefaultImage), pointing "default" at
// it as a name points at any image. New sandboxes and sessions of "default" record "default@DIGEST"
// and boot exactly that image from then on, whatever a later install points the name at. A server
// with no such archive keeps the built-in template: the host's /usr under a generated /etc. That one
// also stays for good for what recorded plain "default" before an image was installed (the legacy
// template): their sessions and snapshots resume as they were.

// InstallDefaultImage points the default template at the image in the archive at path (an OCI archive
// or a `docker save` tarball), importing it into the in-process node, unless the template already
// points at what that file held (the file's size and modification time say so, and the node still
// has the image). With no file at path it changes nothing. It reports the default template and
// whether it installed it now.
func (s *placer) InstallDefaultImage(ctx context.Context, path string) (Template, bool, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		cur, err := s.GetTemplate(ctx, template.DefaultName)
		return cur, false, err
	}
	if err != nil {
		return Template{}, false, fmt.Errorf("default image: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return Template{}, false, fmt.Errorf("default image %s: not a regular file: %w", path, errdefs.ErrInvalidArgument)
	}
	source := fmt.Sprintf("%s %d %d", path, fi.Size(), fi.ModTime().UnixNano())
	imp, err := s.importer(ctx)
	if err != nil {
		return Template{}, false, fmt.Errorf("default image: %w", err)
	}
	if d, err := s.store.GetDoc(ctx, templateDocPrefix+template.DefaultName); err == nil {
		var rec templateDoc
		if json.Unmarshal(d.Value, &rec) == nil && rec.Source == source && s.holdsImage(rec.Digest) {
			cur, err := templateOf(d)
			return cur, false, err
		}
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return Template{}, false, fmt.Errorf("default image: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return Template{}, false, fmt.Errorf("default image: %w", err)
	}
	defer f.Close()
	img, err := imp.ImportImage(ctx, f)
	if err != nil {
		return Template{}, false, fmt.Errorf("default image %s: %w", path, err)
	}
	if err := s.shareImage(ctx, imp, img.Digest); err != nil {
		return Template{}, false, err
	}
	t, err := s.recordTemplateStart(ctx, template.DefaultName, img, nil, source)
	if err != nil {
		return Template{}, false, err
	}
	s.log.Info("default template installed", "image", path, "digest", img.Digest, "layers", len(img.Layers))
	return t, true, nil
}

// holdsImage reports whether the in-process node has the image digest.
func (s *placer) holdsImage(digest string) bool {
	m, err := s.maker()
	if err != nil {
		return false
	}
	_, err = m.StoredImage(digest)
	return err == nil
}
