package oci

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/fsutil"
)

// Store keeps unpacked images under Dir:
//
//	Dir/layers/sha256-<hex>/   a layer, unpacked (by the digest of its uncompressed tar, its diff ID)
//	Dir/images/sha256-<hex>.json   an image: its layers, bottom first, and its config (by manifest digest)
//	Dir/blobs/sha256/<hex>     an image's manifest, config and layer blobs, as they came (blobs.go)
//	Dir/rootfs/sha256-<hex>/   an image's root, mounted read-only (Mount)
//	Dir/base-<v>/sha256-<hex>/ the platform's layer over an image (root.go)
//	Dir/roots/sha256-<hex>/    what a sandbox boots from: the base layer over the image, read-only (Root)
//
// Layers and images never change once there; an import writes each beside its place and renames it in.
type Store struct {
	Dir string
	// Limits bound one import; zero: DefaultLimits.
	Limits Limits
	// Base, if set, writes the layer Root puts over each image; BaseVersion names what it writes (a
	// new version makes each image's base layer again).
	Base        BaseFunc
	BaseVersion string

	mu      sync.Mutex   // serializes imports and mounts
	gcMu    sync.RWMutex // held shared by writers of blobs and layers, alone by Remove (gc.go)
	tmpOnce sync.Once    // clears private mounts an earlier process left (mountPrivate)
}

// Image is an image in the store.
type Image struct {
	// Digest is the image manifest's ("sha256:<hex>"): what names the image for good.
	Digest string `json:"digest"`
	// Layers are the diff IDs of its layers, bottom first.
	Layers []string `json:"layers"`
	// Config is what the image sets for its processes.
	Config Config `json:"config"`
}

// Config is the part of an image's config a sandbox takes as its defaults.
type Config struct {
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	// Labels are the image's labels (a build's LABEL; run.airlock.start-cmd and run.airlock.ready-cmd
	// declare a start command).
	Labels map[string]string `json:"labels,omitempty"`
}

// userRE is the form of an image's User: NAME, UID, or either with :GROUP.
var userRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}(:[A-Za-z0-9_][A-Za-z0-9._-]{0,63})?$`)

// Bounds on what an image's config may hold.
const (
	maxConfigEnv      = 1024
	maxConfigEnvBytes = 256 << 10
	maxConfigArgs     = 1024
	maxConfigLabels   = 256
	maxLabelBytes     = 64 << 10
)

// check refuses a config a sandbox could not take as its defaults: a User that is not NAME, UID or
// either with :GROUP, a WorkingDir that is not an absolute path, NUL bytes, or too much.
func (c Config) check() error {
	if c.User != "" && !userRE.MatchString(c.User) {
		return fmt.Errorf("User %q: want NAME, UID, NAME:GROUP or UID:GID: %w", c.User, errdefs.ErrInvalidArgument)
	}
	if c.WorkingDir != "" && (!filepath.IsAbs(c.WorkingDir) || len(c.WorkingDir) > 4096 || strings.ContainsRune(c.WorkingDir, 0)) {
		return fmt.Errorf("WorkingDir %q: want an absolute path: %w", c.WorkingDir, errdefs.ErrInvalidArgument)
	}
	size := 0
	for _, e := range c.Env {
		size += len(e)
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" || strings.ContainsRune(e, 0) {
			return fmt.Errorf("Env entry %q: want KEY=VALUE: %w", e, errdefs.ErrInvalidArgument)
		}
	}
	if len(c.Env) > maxConfigEnv || size > maxConfigEnvBytes || len(c.Entrypoint)+len(c.Cmd) > maxConfigArgs {
		return fmt.Errorf("more than %d environment entries (%d bytes) or %d arguments: %w", maxConfigEnv, maxConfigEnvBytes, maxConfigArgs, errdefs.ErrInvalidArgument)
	}
	size = 0
	for k, v := range c.Labels {
		size += len(k) + len(v)
		if k == "" || strings.ContainsRune(k+v, 0) {
			return fmt.Errorf("label %q: want a name, and no NUL byte: %w", k, errdefs.ErrInvalidArgument)
		}
	}
	if len(c.Labels) > maxConfigLabels || size > maxLabelBytes {
		return fmt.Errorf("more than %d labels or %d bytes of them: %w", maxConfigLabels, maxLabelBytes, errdefs.ErrInvalidArgument)
	}
	for _, a := range append(append([]string(nil), c.Entrypoint...), c.Cmd...) {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("Entrypoint or Cmd holds a NUL byte: %w", errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// digestRE is the form of the digests the store names things by.
var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// fileName turns a digest into the name of its file or directory ("sha256-<hex>").
func fileName(digest string) string { return strings.Replace(digest, ":", "-", 1) }

// Import reads the image at src — an OCI image layout directory, an OCI archive (a tar of one), or a
// `docker save` tarball — picks linux/amd64 of a multi-platform index, unpacks the layers the store does
// not hold yet and records the image. It returns the image (the same one again for an image imported
// before).
func (s *Store) Import(ctx context.Context, src string) (Image, error) {
	img, cleanup, err := openImage(src)
	if err != nil {
		return Image{}, err
	}
	defer cleanup()
	s.gcMu.RLock()
	defer s.gcMu.RUnlock()
	return s.add(ctx, img)
}

// openImage opens the image at src.
func openImage(src string) (v1.Image, func(), error) {
	none := func() {}
	fi, err := os.Stat(src)
	if err != nil {
		return nil, none, fmt.Errorf("image %s: %w", src, notFound(err))
	}
	if fi.IsDir() {
		img, err := fromLayout(src)
		return img, none, err
	}
	// A tar: an OCI archive (an image layout inside) or docker save's format.
	isLayout, err := tarHas(src, "oci-layout")
	if err != nil {
		return nil, none, err
	}
	if !isLayout {
		img, err := tarball.ImageFromPath(src, nil)
		if err != nil {
			return nil, none, fmt.Errorf("image %s: not an OCI layout, OCI archive or docker save tarball: %v: %w", src, err, errdefs.ErrInvalidArgument)
		}
		return img, none, nil
	}
	tmp, err := os.MkdirTemp("", "airlock-oci-")
	if err != nil {
		return nil, none, err
	}
	cleanup := func() { os.RemoveAll(tmp) }
	if err := extractLayout(src, tmp); err != nil {
		cleanup()
		return nil, none, err
	}
	img, err := fromLayout(tmp)
	if err != nil {
		cleanup()
		return nil, none, err
	}
	return img, cleanup, nil
}

func notFound(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return errdefs.ErrNotFound
	}
	return err
}

// fromLayout opens the image of an OCI image layout: its index's one image, or its linux/amd64 one.
func fromLayout(dir string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("image layout %s: %v: %w", dir, err, errdefs.ErrInvalidArgument)
	}
	return pickImage(idx, dir)
}

// pickImage finds the image to use in idx: the only one, or linux/amd64 (through nested indexes).
func pickImage(idx v1.ImageIndex, where string) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("image index of %s: %v: %w", where, err, errdefs.ErrInvalidArgument)
	}
	var images, indexes []v1.Descriptor
	for _, d := range m.Manifests {
		switch {
		case d.MediaType.IsImage():
			if d.Platform == nil || d.Platform.OS == "linux" && d.Platform.Architecture == "amd64" || len(m.Manifests) == 1 {
				images = append(images, d)
			}
		case d.MediaType.IsIndex():
			indexes = append(indexes, d)
		}
	}
	if len(images) > 0 {
		return idx.Image(images[0].Digest)
	}
	for _, d := range indexes {
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			continue
		}
		if img, err := pickImage(child, where); err == nil {
			return img, nil
		}
	}
	return nil, fmt.Errorf("image %s has no linux/amd64 image: %w", where, errdefs.ErrInvalidArgument)
}

// tarHas reports whether the tar at p has a regular file called name.
func tarHas(p, name string) (bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("image %s: not a tar: %v: %w", p, err, errdefs.ErrInvalidArgument)
		}
		if strings.TrimPrefix(h.Name, "./") == name {
			return true, nil
		}
	}
}

// layoutEntry is what an OCI archive may hold: the layout's files and its blobs, nothing else.
var layoutEntry = regexp.MustCompile(`^(oci-layout|index\.json|blobs/sha256/[0-9a-f]{64})$`)

// extractLayout writes the image layout of the OCI archive src into dir: only its regular files that
// an image layout has (others, directories included, are skipped; dir's structure is made here).
func extractLayout(src, dir string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o700); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("OCI archive %s: %v: %w", src, err, errdefs.ErrInvalidArgument)
		}
		name := strings.TrimPrefix(h.Name, "./")
		if h.Typeflag != tar.TypeReg || !layoutEntry.MatchString(name) {
			continue
		}
		out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, io.LimitReader(tr, h.Size))
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
}

// add unpacks img's layers the store lacks and records it. The caller holds gcMu shared.
func (s *Store) add(ctx context.Context, img v1.Image) (Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	digest, err := img.Digest()
	if err != nil {
		return Image{}, fmt.Errorf("image digest: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Image{}, fmt.Errorf("image %s config: %v: %w", digest, err, errdefs.ErrInvalidArgument)
	}
	if cf.OS != "" && cf.OS != "linux" || cf.Architecture != "" && cf.Architecture != "amd64" {
		return Image{}, fmt.Errorf("image %s is for %s/%s; templates run linux/amd64: %w", digest, cf.OS, cf.Architecture, errdefs.ErrInvalidArgument)
	}
	layers, err := img.Layers()
	if err != nil {
		return Image{}, fmt.Errorf("image %s layers: %v: %w", digest, err, errdefs.ErrInvalidArgument)
	}
	if len(layers) != len(cf.RootFS.DiffIDs) {
		return Image{}, fmt.Errorf("image %s has %d layers and %d diff IDs: %w", digest, len(layers), len(cf.RootFS.DiffIDs), errdefs.ErrInvalidArgument)
	}
	out := Image{Digest: digest.String(), Config: Config{Env: cf.Config.Env, WorkingDir: cf.Config.WorkingDir,
		User: cf.Config.User, Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd, Labels: cf.Config.Labels}}
	if err := out.Config.check(); err != nil {
		return Image{}, fmt.Errorf("image %s config: %w", digest, err)
	}
	if !digestRE.MatchString(out.Digest) {
		return Image{}, fmt.Errorf("image digest %s: only sha256 is taken: %w", out.Digest, errdefs.ErrInvalidArgument)
	}
	lim := s.limits()
	b := &budget{bytes: lim.Bytes, entries: lim.Entries, minFree: lim.MinFree}
	// The image's blobs are kept as they came (checked against their digests), and its layers unpacked
	// from those copies: a registry's are fetched once.
	if err := s.keepBlobs(ctx, img, cf.RootFS.DiffIDs, b); err != nil {
		return Image{}, fmt.Errorf("image %s: %w", digest, err)
	}
	if img, err = s.stored(out.Digest); err != nil {
		return Image{}, err
	}
	if layers, err = img.Layers(); err != nil {
		return Image{}, fmt.Errorf("image %s layers: %v: %w", digest, err, errdefs.ErrInvalidArgument)
	}
	for i, l := range layers {
		diffID := cf.RootFS.DiffIDs[i].String()
		if !digestRE.MatchString(diffID) {
			return Image{}, fmt.Errorf("image %s: layer %d's diff ID %s: only sha256 is taken: %w", digest, i, diffID, errdefs.ErrInvalidArgument)
		}
		if err := s.addLayer(ctx, l, diffID, b); err != nil {
			return Image{}, fmt.Errorf("image %s, layer %d (%s): %w", digest, i, diffID, err)
		}
		out.Layers = append(out.Layers, diffID)
	}
	rec, err := json.Marshal(out)
	if err != nil {
		return Image{}, err
	}
	if err := os.MkdirAll(filepath.Join(s.Dir, "images"), 0o700); err != nil {
		return Image{}, err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(s.Dir, "images", fileName(out.Digest)+".json"), rec, 0o600); err != nil {
		return Image{}, err
	}
	return out, nil
}

// addLayer unpacks layer l (of diff ID diffID) unless the store holds it, checking that its
// uncompressed tar has that digest.
func (s *Store) addLayer(ctx context.Context, l v1.Layer, diffID string, b *budget) error {
	layers := filepath.Join(s.Dir, "layers")
	final := filepath.Join(layers, fileName(diffID))
	if _, err := os.Lstat(final); err == nil {
		return nil
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return fmt.Errorf("%w: open: %v", ErrBadLayer, err)
	}
	defer rc.Close()
	tmp, err := s.unpackToTemp(ctx, rc, diffID, b)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	return nil
}

// unpackToTemp unpacks the layer tar r into a new directory beside the layers' places, checks that
// the tar has the digest diffID, and returns the directory, ready to be renamed into place (nothing is
// left behind on an error).
func (s *Store) unpackToTemp(ctx context.Context, r io.Reader, diffID string, b *budget) (string, error) {
	layers := filepath.Join(s.Dir, "layers")
	if err := os.MkdirAll(layers, 0o700); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(layers, ".tmp-")
	if err != nil {
		return "", err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	h := sha256.New()
	if err := unpackLayer(ctx, io.TeeReader(r, h), tmp, b); err != nil {
		return "", err
	}
	// The rest of the tar (its end blocks, padding) counts toward the digest too.
	if _, err := io.Copy(h, io.LimitReader(r, 1<<20)); err != nil {
		return "", fmt.Errorf("%w: read: %v", ErrBadLayer, err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != diffID {
		return "", fmt.Errorf("%w: its content's digest is %s, not the diff ID the image names", ErrBadLayer, got)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	ok = true
	return tmp, nil
}

// Get returns the image of digest the store holds (errdefs.ErrNotFound if none).
func (s *Store) Get(digest string) (Image, error) {
	if !digestRE.MatchString(digest) {
		return Image{}, fmt.Errorf("image digest %q: want sha256:<64 hex>: %w", digest, errdefs.ErrInvalidArgument)
	}
	b, err := os.ReadFile(filepath.Join(s.Dir, "images", fileName(digest)+".json"))
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", digest, notFound(err))
	}
	var img Image
	if err := json.Unmarshal(b, &img); err != nil {
		return Image{}, fmt.Errorf("image record %s: %w", digest, err)
	}
	return img, nil
}

// Mount mounts the root of image digest read-only (the overlay of its layers; a bind mount of a single
// one) unless it is, and returns its directory.
func (s *Store) Mount(digest string) (string, error) {
	img, err := s.Get(digest)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	dir := filepath.Join(s.Dir, "rootfs", fileName(img.Digest))
	if mounted(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := s.mountAt(img, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// mountAt mounts the root of img read-only at dir (an existing directory).
func (s *Store) mountAt(img Image, dir string) error {
	var lowers []string
	for i := len(img.Layers) - 1; i >= 0; i-- {
		lowers = append(lowers, filepath.Join(s.Dir, "layers", fileName(img.Layers[i])))
	}
	switch len(lowers) {
	case 0:
		return fmt.Errorf("image %s has no layer: %w", img.Digest, errdefs.ErrInvalidArgument)
	case 1:
		if err := unix.Mount(lowers[0], dir, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mount image %s: %w", img.Digest, err)
		}
		if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
			return fmt.Errorf("mount image %s read-only: %w", img.Digest, err)
		}
	default:
		opts := "lowerdir=" + strings.Join(lowers, ":")
		if err := unix.Mount("overlay", dir, "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("mount image %s (%d layers): %w", img.Digest, len(lowers), err)
		}
	}
	return nil
}

// mountPrivate mounts the root of image digest read-only at a directory of its own, for one caller's
// reading, and returns it and the function that unmounts and removes it.
func (s *Store) mountPrivate(digest string) (string, func(), error) {
	img, err := s.Get(digest)
	if err != nil {
		return "", nil, err
	}
	parent := filepath.Join(s.Dir, "tmp")
	s.tmpOnce.Do(func() { // before this process's first: what is there is a crashed one's
		left, _ := filepath.Glob(filepath.Join(parent, "mount-*"))
		for _, d := range left {
			_ = unix.Unmount(d, unix.MNT_DETACH)
			os.Remove(d)
		}
	})
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp(parent, "mount-")
	if err != nil {
		return "", nil, err
	}
	if err := s.mountAt(img, dir); err != nil {
		os.Remove(dir)
		return "", nil, err
	}
	return dir, func() {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		os.Remove(dir)
	}, nil
}

// Unmount unmounts the root of image digest, if it is mounted.
func (s *Store) Unmount(digest string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	dir := filepath.Join(s.Dir, "rootfs", fileName(digest))
	if !mounted(dir) {
		return nil
	}
	return unix.Unmount(dir, unix.MNT_DETACH)
}
