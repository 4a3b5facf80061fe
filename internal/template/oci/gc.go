package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Images come and go by digest: Remove drops the images the caller no longer needs (the control plane
// knows which: no template name, sandbox, session or fresh build-cache entry records them), then every
// layer and blob no remaining image uses. Writers (imports, pulls, derivations) hold gcMu shared from
// their first blob to their image's record, so nothing half-written is taken for garbage.

// GCStats is what a Remove freed.
type GCStats struct {
	Images, Layers, Blobs int
}

// List returns the images the store holds.
func (s *Store) List() ([]Image, error) {
	ents, err := os.ReadDir(filepath.Join(s.Dir, "images"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(name, ".") {
			continue
		}
		img, err := s.Get(strings.Replace(name, "-", ":", 1))
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	return out, nil
}

// Remove removes the images digests (those the store holds; unmounting their roots, which nothing may
// still use) and then every layer and blob that no remaining image uses.
func (s *Store) Remove(digests []string) (GCStats, error) {
	for _, d := range digests {
		if err := CheckDigest(d); err != nil {
			return GCStats{}, err
		}
	}
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	var st GCStats
	for _, d := range digests {
		rec := filepath.Join(s.Dir, "images", fileName(d)+".json")
		if _, err := os.Lstat(rec); errors.Is(err, os.ErrNotExist) {
			continue
		}
		for _, mnt := range []string{filepath.Join(s.Dir, "roots", fileName(d)), filepath.Join(s.Dir, "rootfs", fileName(d))} {
			if mounted(mnt) {
				if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
					return st, fmt.Errorf("remove image %s: unmount: %w", d, err)
				}
			}
			if err := os.Remove(mnt); err != nil && !errors.Is(err, os.ErrNotExist) {
				return st, fmt.Errorf("remove image %s: %w", d, err)
			}
		}
		bases, _ := filepath.Glob(filepath.Join(s.Dir, "base-*", fileName(d)))
		for _, b := range bases {
			if err := os.RemoveAll(b); err != nil {
				return st, fmt.Errorf("remove image %s: %w", d, err)
			}
		}
		if err := os.Remove(rec); err != nil {
			return st, fmt.Errorf("remove image %s: %w", d, err)
		}
		st.Images++
	}
	// What the images left use.
	left, err := s.List()
	if err != nil {
		return st, err
	}
	layers, blobs := map[string]bool{}, map[string]bool{}
	for _, img := range left {
		for _, l := range img.Layers {
			layers[fileName(l)] = true
		}
		blobs[strings.TrimPrefix(img.Digest, "sha256:")] = true
		si, err := s.stored(img.Digest)
		if err != nil {
			continue // an image from before the store kept blobs: it has none
		}
		m, err := si.Manifest()
		if err != nil {
			return st, fmt.Errorf("image %s: %w", img.Digest, err)
		}
		blobs[m.Config.Digest.Hex] = true
		for _, l := range m.Layers {
			blobs[l.Digest.Hex] = true
		}
	}
	// Under the lock no writer is at work: a ".tmp-" entry is a crashed one's.
	n, err := removeUnlisted(filepath.Join(s.Dir, "layers"), layers)
	st.Layers += n
	if err != nil {
		return st, err
	}
	n, err = removeUnlisted(filepath.Join(s.Dir, "blobs", "sha256"), blobs)
	st.Blobs += n
	return st, err
}

// removeUnlisted removes the entries of dir whose names keep does not list, and returns how many.
func removeUnlisted(dir string, keep map[string]bool) (int, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if keep[e.Name()] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return n, err
		}
		if !strings.HasPrefix(e.Name(), ".tmp-") {
			n++
		}
	}
	return n, nil
}
