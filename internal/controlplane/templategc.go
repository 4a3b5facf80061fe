package controlplane

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/template"
)

// A template's image is kept while anything may boot it: a template name that points at it, a sandbox
// not yet stopped, or a session (its snapshots are of that image, and a deleted session's record stays
// while a fork resumes from one of them). A build's cache keeps the images its steps made for
// buildCacheTTL after their last use. The leader looks every GCInterval; an image nothing has kept for
// GCGrace (a create may be about to record it) is removed from the node with the layers and blobs no
// other image uses (oci.Store.Remove).

// buildCacheTTL is how long a build's cache keeps a step's image after the step last made or used it.
const buildCacheTTL = 7 * 24 * time.Hour

// maxUsersListed bounds the IDs TemplateUsers lists (the counts are whole).
const maxUsersListed = 20

// TemplateUsers is what still uses a template's image.
type TemplateUsers struct {
	// Names are the template names that point at it.
	Names []string
	// Sandboxes and Sessions are the IDs of those that recorded it (at most 20 each); SandboxCount and
	// SessionCount count them all.
	Sandboxes, Sessions        []string
	SandboxCount, SessionCount int
}

// InUse reports whether anything uses the image.
func (u TemplateUsers) InUse() bool {
	return len(u.Names) > 0 || u.SandboxCount > 0 || u.SessionCount > 0
}

// TemplateRemoval is what removing a template's name did: the image it pointed at, and what still
// uses that image (which keeps it on the nodes).
type TemplateRemoval struct {
	Name, Digest string
	Users        TemplateUsers
}

// imageUsers returns, by image digest, what uses each image: template names, sandboxes that are not
// stopped and sessions, of every tenant.
func (s *placer) imageUsers(ctx context.Context) (map[string]*TemplateUsers, error) {
	users := map[string]*TemplateUsers{}
	of := func(ref string) *TemplateUsers {
		_, digest, err := template.ParseRef(ref)
		if err != nil || digest == "" {
			return nil
		}
		u := users[digest]
		if u == nil {
			u = &TemplateUsers{}
			users[digest] = u
		}
		return u
	}
	docs, err := s.store.ListDocs(ctx, templateDocPrefix)
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		if t, err := templateOf(d); err == nil {
			if u := of(t.Ref); u != nil {
				u.Names = append(u.Names, t.Name)
			}
		}
	}
	ts, err := s.store.ListTenants(ctx)
	if err != nil {
		return nil, err
	}
	live := []store.SandboxState{store.StateCreating, store.StateRunning, store.StateStopping, store.StateFailed}
	for _, t := range ts {
		for cursor := ""; ; {
			sbs, next, err := s.store.ListSandboxes(ctx, t.ID, store.SandboxFilter{States: live, Limit: store.MaxListLimit, Cursor: cursor})
			if err != nil {
				return nil, err
			}
			for _, sb := range sbs {
				if u := of(sb.Template); u != nil {
					if u.SandboxCount++; len(u.Sandboxes) < maxUsersListed {
						u.Sandboxes = append(u.Sandboxes, sb.ID)
					}
				}
			}
			if cursor = next; next == "" {
				break
			}
		}
		for cursor := ""; ; {
			ses, next, err := s.store.ListSessions(ctx, t.ID, store.SessionFilter{Limit: store.MaxListLimit, Cursor: cursor})
			if err != nil {
				return nil, err
			}
			for _, se := range ses {
				if u := of(se.Spec.Template); u != nil {
					if u.SessionCount++; len(u.Sessions) < maxUsersListed {
						u.Sessions = append(u.Sessions, se.ID)
					}
				}
			}
			if cursor = next; next == "" {
				break
			}
		}
	}
	for _, u := range users {
		sort.Strings(u.Names)
	}
	return users, nil
}

// cachedImages returns the images a build's cache keeps, and forgets the entries older than
// buildCacheTTL.
func (s *placer) cachedImages(ctx context.Context) (map[string]bool, error) {
	docs, err := s.store.ListDocs(ctx, buildDocPrefix)
	if err != nil {
		return nil, err
	}
	keep := map[string]bool{}
	for _, d := range docs {
		var e buildCacheEntry
		if json.Unmarshal(d.Value, &e) != nil || s.now().Sub(d.UpdatedAt) > buildCacheTTL {
			if err := s.store.DeleteDoc(ctx, d.Key, d.Version); err != nil {
				s.log.Debug("forget a build cache entry", "key", d.Key, "err", err)
			}
			continue
		}
		keep[e.Image] = true
	}
	return keep, nil
}

// collectImages removes from the in-process node the images nothing has kept for grace (see above).
// since remembers when each was first seen unkept (the leader's own: a new leader starts again).
func (s *placer) collectImages(since map[string]time.Time, grace time.Duration) {
	m, err := s.maker()
	if err != nil {
		return // no in-process node: images are not kept here
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	imgs, err := m.Images()
	if err != nil {
		s.log.Error("template GC: list images", "err", err)
		return
	}
	if len(imgs) == 0 {
		return
	}
	users, err := s.imageUsers(ctx)
	if err != nil {
		s.log.Error("template GC: what uses the images", "err", err)
		return
	}
	cached, err := s.cachedImages(ctx)
	if err != nil {
		s.log.Error("template GC: the build cache", "err", err)
		return
	}
	now := s.now()
	held := map[string]bool{}
	var drop []string
	for _, img := range imgs {
		held[img.Digest] = true
		if u := users[img.Digest]; u != nil && u.InUse() || cached[img.Digest] {
			delete(since, img.Digest)
			continue
		}
		first, seen := since[img.Digest]
		switch {
		case !seen:
			since[img.Digest] = now
		case now.Sub(first) >= grace:
			drop = append(drop, img.Digest)
		}
	}
	for d := range since {
		if !held[d] {
			delete(since, d)
		}
	}
	if len(drop) == 0 {
		return
	}
	st, err := m.RemoveImages(drop)
	if err != nil {
		s.log.Error("template GC: remove images", "images", strings.Join(drop, ","), "err", err)
		return
	}
	for _, d := range drop {
		delete(since, d)
	}
	s.log.Info("template GC", "images", st.Images, "layers", st.Layers, "blobs", st.Blobs)
}
