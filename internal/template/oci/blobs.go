package oci

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

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

// keepBlobs writes img's blobs the store lacks, leaving b.minFree free. A layer whose blob the store
// lacks and whose contents it has not unpacked either (of diff ID diffIDs[i]) is kept and unpacked in
// one read (keepAndUnpack).
func (s *Store) keepBlobs(ctx context.Context, img v1.Image, diffIDs []v1.Hash, b *budget) error {
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
		if i < len(diffIDs) && digestRE.MatchString(diffIDs[i].String()) && !s.hasLayer(diffIDs[i].String()) {
			if err := s.keepAndUnpack(ctx, l, d, size, diffIDs[i].String(), b); err != nil {
				return fmt.Errorf("layer %d (%s): %w", i, d, err)
			}
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

// hasLayer reports whether the store holds the unpacked layer of diff ID diffID.
func (s *Store) hasLayer(diffID string) bool {
	_, err := os.Lstat(filepath.Join(s.Dir, "layers", fileName(diffID)))
	return err == nil
}

// keepAndUnpack stores layer l's blob (digest d, size bytes) and unpacks its contents, reading it once:
// the compressed bytes go into the blob's file as they are decompressed and unpacked beside the
// layer's place. The blob is checked against d and size and the tar against diffID before either is
// renamed in; a layer that fails leaves neither.
func (s *Store) keepAndUnpack(ctx context.Context, l v1.Layer, d v1.Hash, size int64, diffID string, b *budget) error {
	f, final, err := s.blobTemp(d, size)
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // gone after the rename
	defer f.Close()
	rc, err := l.Compressed()
	if err != nil {
		return fmt.Errorf("%w: open: %v", ErrBadLayer, err)
	}
	defer rc.Close()
	tee := &blobTee{r: rc, f: f, sum: sha256.New(), b: b, size: size, h: d}
	br := bufio.NewReaderSize(tee, 64<<10)
	ur, closeU, err := decompress(br)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadLayer, err)
	}
	defer closeU()
	tmp, err := s.unpackToTemp(ctx, badLayerReader{ur}, diffID, b)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	// The rest of the compressed stream (a trailer) counts toward the blob.
	if _, err := io.Copy(io.Discard, br); err != nil {
		return fmt.Errorf("%w (blob %s)", err, d)
	}
	if tee.n != size {
		return fmt.Errorf("%w: blob %s has %d bytes, not its %d", ErrBadLayer, d, tee.n, size)
	}
	if got := hex.EncodeToString(tee.sum.Sum(nil)); got != d.Hex {
		return fmt.Errorf("%w: blob %s has the digest sha256:%s", ErrBadLayer, d, got)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(s.Dir, "layers", fileName(diffID))); err != nil {
		return err
	}
	ok = true
	return os.Rename(f.Name(), final)
}

// checkBlob reports whether blob h of size bytes is one the store takes: sha256, a size not negative.
func checkBlob(h v1.Hash, size int64) error {
	if h.Algorithm != "sha256" || !digestRE.MatchString(h.String()) {
		return fmt.Errorf("blob digest %s: only sha256 is taken: %w", h, errdefs.ErrInvalidArgument)
	}
	if size < 0 {
		return fmt.Errorf("blob %s: size %d: %w", h, size, errdefs.ErrInvalidArgument)
	}
	return nil
}

// blobTemp checks that blob h of size bytes is one the store takes and opens a temporary file beside
// its place, returning it and the place.
func (s *Store) blobTemp(h v1.Hash, size int64) (*os.File, string, error) {
	if err := checkBlob(h, size); err != nil {
		return nil, "", err
	}
	final := s.blobPath(h)
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return nil, "", err
	}
	f, err := os.CreateTemp(filepath.Dir(final), ".tmp-")
	if err != nil {
		return nil, "", err
	}
	return f, final, nil
}

// blobTee reads a blob's compressed bytes from r, writing each into f and its digest as it goes,
// refusing more than size bytes and checking every freeCheckEvery bytes (and first) that f's file
// system keeps b.minFree free.
type blobTee struct {
	r    io.Reader
	f    *os.File
	sum  hash.Hash
	b    *budget
	h    v1.Hash
	size int64
	n    int64
}

func (t *blobTee) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		if t.n+int64(n) > t.size {
			return 0, fmt.Errorf("%w: blob %s is longer than its %d bytes", ErrBadLayer, t.h, t.size)
		}
		if t.n == 0 || t.n/freeCheckEvery != (t.n+int64(n))/freeCheckEvery {
			if err := t.b.room(t.f, freeCheckEvery); err != nil {
				return 0, err
			}
		}
		if _, err := t.f.Write(p[:n]); err != nil {
			if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
				return 0, fmt.Errorf("the node's disk is full: %v: %w", err, errdefs.ErrResourceExhausted)
			}
			return 0, err
		}
		t.sum.Write(p[:n])
		t.n += int64(n)
	}
	return n, err
}

// badLayerReader reads a layer's contents, reporting a stream that does not decompress as ErrBadLayer
// (what the node could not do, such as find room on its disk, is passed on as it is).
type badLayerReader struct{ r io.Reader }

func (r badLayerReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, ErrBadLayer) && !errors.Is(err, errdefs.ErrResourceExhausted) {
		err = fmt.Errorf("%w: %v", ErrBadLayer, err)
	}
	return n, err
}

// decompress returns the tar a layer blob holds: gunzipped, un-zstd'd, or as it is, by its first bytes.
func decompress(br *bufio.Reader) (io.Reader, func(), error) {
	magic, _ := br.Peek(4)
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, err
		}
		return zr, func() { zr.Close() }, nil
	case len(magic) == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd:
		zr, err := zstd.NewReader(br)
		if err != nil {
			return nil, nil, err
		}
		return zr, zr.Close, nil
	}
	return br, func() {}, nil
}

// hasBlob reports whether the store holds blob h of size bytes (written whole: blobs are renamed in).
func (s *Store) hasBlob(h v1.Hash, size int64) bool {
	fi, err := os.Lstat(s.blobPath(h))
	return err == nil && fi.Mode().IsRegular() && fi.Size() == size
}

// writeBlob stores the size bytes of r as blob h, unless the store has it: written beside its place,
// checked against h and size, then renamed in.
func (s *Store) writeBlob(h v1.Hash, size int64, r io.Reader, b *budget) error {
	if err := checkBlob(h, size); err != nil {
		return err
	}
	if s.hasBlob(h, size) {
		return nil
	}
	f, final, err := s.blobTemp(h, size)
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
