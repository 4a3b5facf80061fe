package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/airlockrun/airlock/internal/blob"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// A cluster's nodes share images through the blob store the snapshots use: Publish writes an image's
// blobs (manifest, config, layers, as the store keeps them) under templates/sha256/<hex>/, each in
// chunks of ShareChunk bytes (00000000, 00000001, …) and then a "size" object ("<bytes> <chunks>")
// that says the blob is whole; Fetch adds an image from there as Pull does from a registry, every blob
// checked against its digest (the manifest's against the digest asked for), so a blob store that lies
// cannot put anything else into a template. Blobs are not encrypted: templates are the operator's,
// shared by every tenant, and hold no tenant's data.

// ShareChunk is the size of the pieces a shared blob is stored in.
const ShareChunk = 16 << 20

// sharedPrefix is where shared blobs are kept in the blob store.
const sharedPrefix = "templates/sha256/"

func sharedKey(h v1.Hash, part string) string { return sharedPrefix + h.Hex + "/" + part }

// Publish writes the blobs of stored image digest that bs lacks into bs.
func (s *Store) Publish(ctx context.Context, bs blob.Store, digest string) error {
	if _, err := s.Get(digest); err != nil {
		return err
	}
	img, err := s.stored(digest)
	if err != nil {
		return err
	}
	m, err := img.Manifest()
	if err != nil {
		return fmt.Errorf("image %s manifest: %w", digest, err)
	}
	md, _ := v1.NewHash(digest)
	blobs := []v1.Hash{m.Config.Digest}
	for _, l := range m.Layers {
		blobs = append(blobs, l.Digest)
	}
	blobs = append(blobs, md) // the manifest last: a fetch starts from it
	for _, h := range blobs {
		if err := s.publishBlob(ctx, bs, h); err != nil {
			return fmt.Errorf("publish image %s: blob %s: %w", digest, h, err)
		}
	}
	return nil
}

// publishBlob writes the store's blob h into bs in chunks, unless bs has it whole.
func (s *Store) publishBlob(ctx context.Context, bs blob.Store, h v1.Hash) error {
	if _, _, err := sharedSize(ctx, bs, h); err == nil {
		return nil
	}
	f, err := os.Open(s.blobPath(h))
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, ShareChunk)
	var size int64
	chunks := 0
	for {
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			if err := bs.Put(ctx, sharedKey(h, fmt.Sprintf("%08d", chunks)), buf[:n]); err != nil {
				return err
			}
			size += int64(n)
			chunks++
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	return bs.Put(ctx, sharedKey(h, "size"), []byte(fmt.Sprintf("%d %d", size, chunks)))
}

// sharedSize reads the size and chunk count of shared blob h (errdefs.ErrNotFound: not there whole).
func sharedSize(ctx context.Context, bs blob.Store, h v1.Hash) (int64, int, error) {
	b, err := bs.Get(ctx, sharedKey(h, "size"))
	if err != nil {
		return 0, 0, err
	}
	sz, cn, ok := strings.Cut(string(b), " ")
	size, err1 := strconv.ParseInt(sz, 10, 64)
	chunks, err2 := strconv.Atoi(cn)
	if !ok || err1 != nil || err2 != nil || size < 0 || chunks < 0 || int64(chunks) != (size+ShareChunk-1)/ShareChunk {
		return 0, 0, fmt.Errorf("%w: shared blob %s: a size record %q that does not parse", ErrBadLayer, h, b)
	}
	return size, chunks, nil
}

// Fetch adds image digest from bs, where a node published it, unpacking the layers the store lacks
// (see Pull). An image the store has already is returned as it is.
func (s *Store) Fetch(ctx context.Context, bs blob.Store, digest string) (Image, error) {
	if img, err := s.Get(digest); err == nil {
		return img, nil
	}
	h, err := v1.NewHash(digest)
	if err != nil || !digestRE.MatchString(digest) {
		return Image{}, fmt.Errorf("image digest %q: %w", digest, errdefs.ErrInvalidArgument)
	}
	raw, err := readShared(ctx, bs, h, maxMetaBlob)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return Image{}, fmt.Errorf("image %s is neither on this node nor in the blob store: %w", digest, errdefs.ErrNotFound)
		}
		return Image{}, fmt.Errorf("fetch image %s: manifest: %w", digest, err)
	}
	core := &sharedImage{ctx: ctx, bs: bs, manifest: raw}
	img, err := partial.CompressedToImage(core)
	if err != nil {
		return Image{}, fmt.Errorf("fetch image %s: %v: %w", digest, err, ErrBadLayer)
	}
	if got, err := img.Digest(); err != nil || got != h {
		return Image{}, fmt.Errorf("%w: the blob store's manifest of %s has the digest %s", ErrBadLayer, digest, got)
	}
	s.gcMu.RLock()
	defer s.gcMu.RUnlock()
	out, err := s.add(ctx, img)
	if err != nil {
		return Image{}, fmt.Errorf("fetch image %s: %w", digest, err)
	}
	return out, nil
}

// readShared reads the whole of shared blob h, refusing one over limit bytes.
func readShared(ctx context.Context, bs blob.Store, h v1.Hash, limit int64) ([]byte, error) {
	size, _, err := sharedSize(ctx, bs, h)
	if err != nil {
		return nil, err
	}
	if size > limit {
		return nil, fmt.Errorf("%w: shared blob %s is %d bytes, over %d", ErrBadLayer, h, size, limit)
	}
	rc, err := openShared(ctx, bs, h)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, limit+1))
}

// openShared reads shared blob h chunk by chunk.
func openShared(ctx context.Context, bs blob.Store, h v1.Hash) (io.ReadCloser, error) {
	size, chunks, err := sharedSize(ctx, bs, h)
	if err != nil {
		return nil, err
	}
	return &sharedReader{ctx: ctx, bs: bs, h: h, chunks: chunks, left: size}, nil
}

// sharedReader reads a shared blob's chunks in turn, at most the size its record gives.
type sharedReader struct {
	ctx    context.Context
	bs     blob.Store
	h      v1.Hash
	next   int
	chunks int
	left   int64
	cur    *bytes.Reader
}

func (r *sharedReader) Read(p []byte) (int, error) {
	for r.cur == nil || r.cur.Len() == 0 {
		if r.next >= r.chunks || r.left <= 0 {
			return 0, io.EOF
		}
		b, err := r.bs.Get(r.ctx, sharedKey(r.h, fmt.Sprintf("%08d", r.next)))
		if err != nil {
			return 0, fmt.Errorf("shared blob %s, chunk %d: %w", r.h, r.next, err)
		}
		r.next++
		r.cur = bytes.NewReader(b)
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.cur.Read(p)
	r.left -= int64(n)
	return n, err
}

func (r *sharedReader) Close() error { return nil }

// sharedImage is an image whose blobs are read from the blob store (partial.CompressedImageCore).
type sharedImage struct {
	ctx      context.Context
	bs       blob.Store
	manifest []byte
	parsed   *v1.Manifest
}

func (i *sharedImage) RawManifest() ([]byte, error) { return i.manifest, nil }

func (i *sharedImage) m() (*v1.Manifest, error) {
	if i.parsed == nil {
		m, err := v1.ParseManifest(bytes.NewReader(i.manifest))
		if err != nil {
			return nil, err
		}
		i.parsed = m
	}
	return i.parsed, nil
}

func (i *sharedImage) MediaType() (types.MediaType, error) {
	m, err := i.m()
	if err != nil {
		return "", err
	}
	if m.MediaType == "" {
		return types.OCIManifestSchema1, nil
	}
	return m.MediaType, nil
}

func (i *sharedImage) RawConfigFile() ([]byte, error) {
	m, err := i.m()
	if err != nil {
		return nil, err
	}
	return readShared(i.ctx, i.bs, m.Config.Digest, maxMetaBlob)
}

func (i *sharedImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	m, err := i.m()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Layers {
		if d.Digest == h {
			return &sharedLayer{img: i, desc: d}, nil
		}
	}
	return nil, fmt.Errorf("layer %s is not in the manifest", h)
}

// sharedLayer is a layer of a sharedImage: its compressed blob as the manifest describes it (the store
// checks it against its digest and size as it keeps it).
type sharedLayer struct {
	img  *sharedImage
	desc v1.Descriptor
}

func (l *sharedLayer) Digest() (v1.Hash, error) { return l.desc.Digest, nil }
func (l *sharedLayer) Size() (int64, error)     { return l.desc.Size, nil }
func (l *sharedLayer) MediaType() (types.MediaType, error) {
	return l.desc.MediaType, nil
}
func (l *sharedLayer) Compressed() (io.ReadCloser, error) {
	return openShared(l.img.ctx, l.img.bs, l.desc.Digest)
}
