package controlplane

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// The image cache keeps, on this node, the checkpoint images of the snapshots taken here most recently,
// so that resuming or forking one skips fetching and decrypting it back from the snapshot store. It is
// an optimisation only: an image is cached once its snapshot is complete in the store, the cache is
// emptied at start (a crash may have torn its files), and it is bounded by Config.ImageCacheBytes
// (oldest first out). Restores use a hard-linked copy, so eviction never pulls files from under them.
// Images still waiting for their upload (uploads.go) are not the cache's: they stay until uploaded.

// cacheImage moves a snapshot's image directory into the cache (or removes it when there is no cache).
func (s *Service) cacheImage(snapID, dir string) {
	s.imagesMu.Lock()
	defer s.imagesMu.Unlock()
	if s.images == "" || s.imageBudget <= 0 {
		os.RemoveAll(dir)
		return
	}
	dst := filepath.Join(s.images, snapID)
	if err := os.Rename(dir, dst); err != nil {
		s.log.Warn("cache snapshot image", "snapshot", snapID, "err", err)
		os.RemoveAll(dir)
		return
	}
	s.evictImagesLocked()
}

// linkCachedImage fills the empty directory dir with hard links to the image of snapID kept on this
// node — cached, or saved and waiting for its upload — and reports whether it could.
func (s *Service) linkCachedImage(snapID, dir string) bool {
	s.imagesMu.Lock()
	defer s.imagesMu.Unlock()
	src := ""
	for _, d := range []string{s.images, s.pending} {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, snapID)); err == nil {
			src = filepath.Join(d, snapID)
			break
		}
	}
	if src == "" {
		return false
	}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dir, rel)
		switch {
		case rel == ".":
			return nil
		case d.IsDir():
			return os.Mkdir(to, 0o700)
		default:
			return os.Link(p, to)
		}
	})
	if err != nil {
		s.log.Warn("use cached snapshot image", "snapshot", snapID, "err", err)
		clearDir(dir)
		return false
	}
	now := time.Now()
	_ = os.Chtimes(src, now, now) // most recently used
	return true
}

// dropImages stops the uploads of these snapshots and removes their images from this node, cached or
// pending.
func (s *Service) dropImages(snapIDs ...string) {
	for _, id := range snapIDs {
		s.cancelUpload(id)
	}
	s.imagesMu.Lock()
	defer s.imagesMu.Unlock()
	for _, id := range snapIDs {
		for _, d := range []string{s.images, s.pending} {
			if d != "" {
				os.RemoveAll(filepath.Join(d, id))
			}
		}
	}
}

// clearImages empties the cache.
func (s *Service) clearImages() {
	if s.images == "" {
		return
	}
	s.imagesMu.Lock()
	defer s.imagesMu.Unlock()
	clearDir(s.images)
}

// evictImagesLocked removes the least recently used images until the cache fits its budget.
func (s *Service) evictImagesLocked() {
	entries, err := os.ReadDir(s.images)
	if err != nil {
		return
	}
	type image struct {
		path  string
		used  time.Time
		bytes int64
	}
	var all []image
	var total int64
	for _, e := range entries {
		p := filepath.Join(s.images, e.Name())
		info, err := e.Info()
		if err != nil {
			continue
		}
		var n int64
		_ = filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					n += fi.Size()
				}
			}
			return nil
		})
		all = append(all, image{p, info.ModTime(), n})
		total += n
	}
	sort.Slice(all, func(i, j int) bool { return all[i].used.Before(all[j].used) })
	for _, im := range all {
		if total <= s.imageBudget {
			break
		}
		os.RemoveAll(im.path)
		total -= im.bytes
	}
}

// clearDir removes what dir holds, keeping dir.
func clearDir(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}
