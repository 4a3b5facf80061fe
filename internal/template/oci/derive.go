package oci

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/gzip"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Scratch names the empty image Derive may start from.
const Scratch = "scratch"

// Step is what Derive adds to an image.
type Step struct {
	// Layer, if not nil, is one more layer on top: an uncompressed tar, whiteouts as the OCI image spec
	// writes them (.wh. files). It is unpacked and checked like an imported layer.
	Layer io.Reader
	// Config replaces the image's config (Env, WorkingDir, User, Entrypoint, Cmd).
	Config Config
	// CreatedBy is recorded in the image's history (e.g. the Dockerfile instruction).
	CreatedBy string
	// Into says Layer is copied into the parent image (a build's COPY, WORKDIR): paths are resolved
	// through the image's symbolic links (within its root), and a directory entry where the image has a
	// directory takes the image's mode and owner (so copying into /tmp keeps it /tmp).
	Into bool
}

// Derive makes a new image from the stored image parent (or Scratch): its layers and the step's. The
// new image's blobs are stored like an imported image's, and its digest depends only on its content.
func (s *Store) Derive(ctx context.Context, parent string, step Step) (Image, error) {
	if err := step.Config.check(); err != nil {
		return Image{}, err
	}
	// Shared with other writers until the image is recorded (add does not take it: no nested read lock).
	s.gcMu.RLock()
	defer s.gcMu.RUnlock()
	var base v1.Image
	if parent == Scratch {
		base = mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	} else {
		var err error
		if base, err = s.stored(parent); err != nil {
			return Image{}, err
		}
	}
	img := base
	hist := v1.History{CreatedBy: step.CreatedBy, EmptyLayer: step.Layer == nil}
	if step.Layer != nil {
		layer := step.Layer
		if step.Into && parent != Scratch {
			root, unmount, err := s.mountPrivate(parent)
			if err != nil {
				return Image{}, err
			}
			defer unmount()
			r, err := os.OpenRoot(root)
			if err != nil {
				return Image{}, err
			}
			defer r.Close()
			pr, pw := io.Pipe()
			done := make(chan struct{})
			go func() { // owner: Derive, which waits for it
				defer close(done)
				pw.CloseWithError(into(step.Layer, pw, r))
			}()
			defer func() { pr.Close(); <-done }()
			layer = pr
		}
		l, err := s.newLayer(layer)
		if err != nil {
			return Image{}, err
		}
		img, err = mutate.Append(base, mutate.Addendum{Layer: l, History: hist, MediaType: types.OCILayer})
		if err != nil {
			return Image{}, fmt.Errorf("derive from %s: %w", parent, err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Image{}, fmt.Errorf("derive from %s: config: %w", parent, err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env, cf.Config.WorkingDir, cf.Config.User = step.Config.Env, step.Config.WorkingDir, step.Config.User
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.Labels = step.Config.Entrypoint, step.Config.Cmd, step.Config.Labels
	if step.Layer == nil {
		cf.History = append(cf.History, hist)
	}
	// No times: the same steps over the same parent make the same image.
	cf.Created = v1.Time{}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return Image{}, fmt.Errorf("derive from %s: %w", parent, err)
	}
	return s.add(ctx, img)
}

// newLayer stores the uncompressed layer tar r as a gzip-compressed blob (its digests computed as it is
// written) and returns it.
func (s *Store) newLayer(r io.Reader) (v1.Layer, error) {
	dir := filepath.Join(s.Dir, "blobs", "sha256")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name()) // gone after the rename
	defer f.Close()
	lim := s.limits()
	b := &budget{bytes: lim.Bytes, entries: lim.Entries, minFree: lim.MinFree}
	compressed, uncompressed := sha256.New(), sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(f, compressed), 1<<20)
	zw, err := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	// Checked as it is written: room on the disk, and the bytes an import may hold.
	n, err := copyChecked(zw, io.TeeReader(r, uncompressed), f, b)
	if err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: the layer is empty (not even a tar's end)", ErrBadLayer)
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	digest := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(compressed.Sum(nil))}
	diffID := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(uncompressed.Sum(nil))}
	if err := os.Rename(f.Name(), s.blobPath(digest)); err != nil {
		return nil, err
	}
	return partial.CompressedToLayer(&newLayer{storedLayer: storedLayer{path: s.blobPath(digest),
		desc: v1.Descriptor{Digest: digest, Size: fi.Size(), MediaType: types.OCILayer}}, diffID: diffID})
}

// copyChecked copies r to w, checking every freeCheckEvery bytes that f's file system keeps b.minFree
// free and that no more than b.bytes are copied.
func copyChecked(w io.Writer, r io.Reader, f *os.File, b *budget) (int64, error) {
	var total int64
	for {
		if err := b.room(f, freeCheckEvery); err != nil {
			return total, err
		}
		n, err := io.CopyN(w, r, freeCheckEvery)
		total += n
		if err := b.take(n); err != nil {
			return total, err
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// newLayer is a layer Derive stored, whose diff ID it computed as it wrote it.
type newLayer struct {
	storedLayer
	diffID v1.Hash
}

func (l *newLayer) DiffID() (v1.Hash, error) { return l.diffID, nil }

// limits returns the store's import limits, defaults filled in.
func (s *Store) limits() Limits {
	lim := s.Limits
	if lim == (Limits{}) {
		lim = DefaultLimits
	}
	if lim.MinFree == 0 {
		lim.MinFree = DefaultLimits.MinFree
	}
	return lim
}

// Export writes the stored image digest to w as an OCI archive (a tar of an OCI image layout) that
// Import takes back as the same image.
func (s *Store) Export(ctx context.Context, digest string, w io.Writer) error {
	img, err := s.stored(digest)
	if err != nil {
		return err
	}
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}
	h, err := v1.NewHash(digest)
	if err != nil {
		return err
	}
	index, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex,
		Manifests: []v1.Descriptor{{MediaType: mt, Digest: h, Size: int64(len(raw)),
			Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}}})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	add := func(name string, size int64, r io.Reader) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg, Format: tar.FormatPAX, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		_, err := io.CopyN(tw, r, size)
		return err
	}
	layoutFile := []byte(`{"imageLayoutVersion":"1.0.0"}`)
	if err := add("oci-layout", int64(len(layoutFile)), bytes.NewReader(layoutFile)); err != nil {
		return err
	}
	if err := add("index.json", int64(len(index)), bytes.NewReader(index)); err != nil {
		return err
	}
	blobs := append([]v1.Descriptor{m.Config}, m.Layers...)
	seen := map[v1.Hash]bool{}
	for _, d := range blobs {
		if seen[d.Digest] {
			continue
		}
		seen[d.Digest] = true
		f, err := os.Open(s.blobPath(d.Digest))
		if err != nil {
			return fmt.Errorf("image %s: blob %s: %w", digest, d.Digest, notFound(err))
		}
		err = add("blobs/sha256/"+d.Digest.Hex, d.Size, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	if err := add("blobs/sha256/"+h.Hex, int64(len(raw)), bytes.NewReader(raw)); err != nil {
		return err
	}
	return tw.Close()
}

// into copies the layer tar r to w as a copy into the image whose root is root (Step.Into): every
// entry's directories, and a directory entry itself, are resolved in the image as Docker's COPY does,
// following the image's symbolic links without leaving its root (COPY tool /bin/ into an image whose /bin
// is a link to usr/bin writes /usr/bin/tool, and keeps the link); a directory the image has keeps its
// mode and owner.
func into(r io.Reader, w io.Writer, root *os.Root) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return tw.Close()
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadLayer, err)
		}
		name, err := entryName(h.Name)
		if err != nil {
			return err
		}
		if h.Typeflag == tar.TypeDir {
			name, err = inImage(root, name)
		} else if dir := path.Dir(name); dir != "." {
			dir, err = inImage(root, dir)
			name = path.Join(dir, path.Base(name))
		}
		if err != nil {
			return fmt.Errorf("%w: /%s: %v", ErrBadLayer, h.Name, err)
		}
		if name == "." {
			continue // the image's root: it has one
		}
		h.Name = name
		if h.Typeflag == tar.TypeDir {
			h.Name += "/"
			if fi, err := root.Lstat(name); err == nil && fi.IsDir() {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					h.Mode, h.Uid, h.Gid = int64(st.Mode&0o7777), int(st.Uid), int(st.Gid)
				}
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			if _, err := io.CopyN(tw, tr, h.Size); err != nil {
				return fmt.Errorf("%w: /%s: %v", ErrBadLayer, name, err)
			}
		}
	}
}

// maxLinkHops bounds the symbolic links one path's resolution follows (the kernel's own bound).
const maxLinkHops = 40

// inImage resolves rel (clean, relative) in the image at root: each component that is a symbolic link
// in the image is replaced by its target, read as a path in the image (an absolute target from the
// image's root, ".." stopping at it). It returns the resolved path, relative ("." for the root); what
// does not exist yet is kept as written.
func inImage(root *os.Root, rel string) (string, error) {
	var done []string // resolved components
	todo := strings.Split(rel, "/")
	hops := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) > 0 {
				done = done[:len(done)-1]
			}
			continue
		}
		cur := path.Join(append(done, c)...)
		fi, err := root.Lstat(cur)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			done = append(done, c)
			continue
		}
		if hops++; hops > maxLinkHops {
			return "", fmt.Errorf("too many symbolic links in the image")
		}
		target, err := root.Readlink(cur)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			done = nil
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	if len(done) == 0 {
		return ".", nil
	}
	return path.Join(done...), nil
}
