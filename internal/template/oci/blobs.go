package oci

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/fsutil"
)

// The store keeps every image as it came besides its unpacked layers: its manifest, config and layer
// blobs (compressed or not, as the image had them) under Dir/blobs/sha256/<hex>, each checked against
// its digest before it is named by it. Derive builds new images on them and Export writes them out, so
// an exported image has the digest it was imported with.

// maxMetaBlob bounds a manifest or config blob.
const maxMetaBlob = 4 << 20

func (s *Store) blobPath(h v1.Hash) string { return filepath.Join(s.Dir, "blobs", h.Algorithm, h.Hex) }

// keepBlobs writes img's blobs the store lacks, leaving b.minFree free.
func (s *Store) keepBlobs(img v1.Image, b *budget) error {
	m, err := img.Manifest()
	if err != nil {
		return fmt.Errorf("manifest: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("layers: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	for i, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return fmt.Errorf("layer %d digest: %v: %w", i, err, errdefs.ErrInvalidArgument)
		}
		size, err := l.Size()
		if err != nil {
			return fmt.Errorf("layer %d size: %v: %w", i, err, errdefs.ErrInvalidArgument)
		}
		if s.hasBlob(d, size) {
			continue
		}
		rc, err := l.Compressed()
		if err != nil {
			return fmt.Errorf("%w: layer %d: open: %v", ErrBadLayer, i, err)
		}
		err = s.writeBlob(d, size, rc, b)
		rc.Close()
		if err != nil {
			return fmt.Errorf("layer %d (%s): %w", i, d, err)
		}
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return fmt.Errorf("config: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if err := s.writeBlob(m.Config.Digest, int64(len(cfg)), bytes.NewReader(cfg), b); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	raw, err := img.RawManifest()
	if err != nil {
		return fmt.Errorf("manifest: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	d, err := img.Digest()
	if err != nil {
		return fmt.Errorf("manifest digest: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if err := s.writeBlob(d, int64(len(raw)), bytes.NewReader(raw), b); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	return nil
}

// hasBlob reports whether the store holds blob h of size bytes (written whole: blobs are renamed in).
func (s *Store) hasBlob(h v1.Hash, size int64) bool {
	fi, err := os.Lstat(s.blobPath(h))
	return err == nil && fi.Mode().IsRegular() && fi.Size() == size
}

// writeBlob stores the size bytes of r as blob h, unless the store has it: written beside its place,
// checked against h and size, then renamed in.
func (s *Store) writeBlob(h v1.Hash, size int64, r io.Reader, b *budget) error {
	if h.Algorithm != "sha256" || !digestRE.MatchString(h.String()) {
		return fmt.Errorf("blob digest %s: only sha256 is taken: %w", h, errdefs.ErrInvalidArgument)
	}
	if size < 0 {
		return fmt.Errorf("blob %s: size %d: %w", h, size, errdefs.ErrInvalidArgument)
	}
	if s.hasBlob(h, size) {
		return nil
	}
	final := s.blobPath(h)
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(final), ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // gone after the rename
	defer f.Close()
	sum := sha256.New()
	if err := b.copyFile(f, io.TeeReader(r, sum), size); err != nil {
		return fmt.Errorf("%w (blob %s)", err, h)
	}
	if n, _ := io.Copy(io.Discard, io.LimitReader(r, 1)); n != 0 {
		return fmt.Errorf("%w: blob %s is longer than its %d bytes", ErrBadLayer, h, size)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != h.Hex {
		return fmt.Errorf("%w: blob %s has the digest sha256:%s", ErrBadLayer, h, got)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), final)
}

// stored returns the image of manifest digest as the store keeps its blobs (errdefs.ErrNotFound if it
// does not: an image imported before the store kept blobs).
func (s *Store) stored(digest string) (v1.Image, error) {
	h, err := v1.NewHash(digest)
	if err != nil {
		return nil, fmt.Errorf("image digest %q: %v: %w", digest, err, errdefs.ErrInvalidArgument)
	}
	raw, err := fsutil.ReadFileLimit(s.blobPath(h), maxMetaBlob)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("image %s: the store does not keep its blobs (it was imported by an older version): import it again: %w", digest, errdefs.ErrNotFound)
		}
		return nil, err
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("image %s manifest: %w", digest, err)
	}
	mt := m.MediaType
	if mt == "" {
		mt = types.OCIManifestSchema1
	}
	return partial.CompressedToImage(&storedImage{s: s, raw: raw, m: m, mt: mt})
}

// storedImage is an image whose blobs the store keeps (partial.CompressedImageCore).
type storedImage struct {
	s   *Store
	raw []byte
	m   *v1.Manifest
	mt  types.MediaType
}

func (i *storedImage) RawManifest() ([]byte, error)        { return i.raw, nil }
func (i *storedImage) MediaType() (types.MediaType, error) { return i.mt, nil }
func (i *storedImage) RawConfigFile() ([]byte, error) {
	return fsutil.ReadFileLimit(i.s.blobPath(i.m.Config.Digest), maxMetaBlob)
}

func (i *storedImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, d := range i.m.Layers {
		if d.Digest == h {
			return &storedLayer{path: i.s.blobPath(h), desc: d}, nil
		}
	}
	if i.m.Config.Digest == h {
		return &storedLayer{path: i.s.blobPath(h), desc: i.m.Config}, nil
	}
	return nil, fmt.Errorf("image has no blob %s: %w", h, errdefs.ErrNotFound)
}

// storedLayer is a layer blob the store keeps (partial.CompressedLayer).
type storedLayer struct {
	path string
	desc v1.Descriptor
}

func (l *storedLayer) Digest() (v1.Hash, error)            { return l.desc.Digest, nil }
func (l *storedLayer) Size() (int64, error)                { return l.desc.Size, nil }
func (l *storedLayer) MediaType() (types.MediaType, error) { return l.desc.MediaType, nil }
func (l *storedLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }
