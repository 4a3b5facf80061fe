package api

import (
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"time"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/retention"
	"github.com/airlockrun/airlock/internal/store"
)

// The time machine's routes: restore to a snapshot or a time, the timeline, pins.

func toRetention(r *wire.Retention) store.RetentionSpec {
	if r == nil {
		return store.RetentionSpec{}
	}
	return store.RetentionSpec{KeepAllSeconds: r.KeepAllSeconds, KeepHourlySeconds: r.KeepHourlySeconds, KeepDailySeconds: r.KeepDailySeconds}
}

func fromRetention(r store.RetentionSpec) *wire.Retention {
	if r == (store.RetentionSpec{}) {
		return nil
	}
	return &wire.Retention{KeepAllSeconds: r.KeepAllSeconds, KeepHourlySeconds: r.KeepHourlySeconds, KeepDailySeconds: r.KeepDailySeconds}
}

// checkSnapshotID returns an invalid-argument error naming what when id is not a snapshot ID.
func checkSnapshotID(what, id string) error {
	if !snapshotIDPattern.MatchString(id) {
		return clientErr(errdefs.ErrInvalidArgument, "invalid %s %q: want sn_ followed by 26 characters", what, truncate(id, 64))
	}
	return nil
}

// sessionSnapshot returns the {id} and {snapshot} of the path, or an invalid-argument error.
func sessionSnapshot(r *http.Request) (id, snapID string, err error) {
	if id, err = sessionID(r); err != nil {
		return "", "", err
	}
	snapID = r.PathValue("snapshot")
	return id, snapID, checkSnapshotID("snapshot id", snapID)
}

func (s *Server) restoreSession(w http.ResponseWriter, r *http.Request) {
	id, err := sessionID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var req wire.RestoreSessionRequest
	if _, err := readJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if req.SnapshotID != "" {
		if err := checkSnapshotID("snapshot_id", req.SnapshotID); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	creq := controlplane.RestoreRequest{SnapshotID: req.SnapshotID}
	if req.At != nil {
		creq.At = *req.At
	}
	se, err := s.cp.RestoreSession(r.Context(), tenantOf(r), id, creq)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, s.toSession(r.Context(), tenantOf(r), se))
}

func (s *Server) timeline(w http.ResponseWriter, r *http.Request) {
	id, err := sessionID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	se, sns, err := s.cp.Timeline(r.Context(), tenantOf(r), id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := wire.Timeline{HeadSnapshotID: se.HeadSnapshotID, Snapshots: make([]wire.Snapshot, 0, len(sns))}
	for _, sn := range sns {
		out.Snapshots = append(out.Snapshots, toSnapshot(sn))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) updateSnapshot(w http.ResponseWriter, r *http.Request) {
	id, snapID, err := sessionSnapshot(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var req wire.UpdateSnapshotRequest
	if _, err := readJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	sn, err := s.cp.UpdateSnapshot(r.Context(), tenantOf(r), id, snapID, req.Pinned, req.Name)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, toSnapshot(sn))
}

// snapshotCall resolves the session and snapshot of the path and the query's path, for the routes
// that read a snapshot's files.
func (s *Server) snapshotCall(w http.ResponseWriter, r *http.Request, f func(id, snapID, path string) error) {
	if err := onlyQuery(r, "path"); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	id, snapID, err := sessionSnapshot(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	p, err := filePath(r, "path")
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if err := f(id, snapID, p); err != nil {
		writeError(w, r, s.log, err)
	}
}

func (s *Server) readSnapshotFile(w http.ResponseWriter, r *http.Request) {
	s.snapshotCall(w, r, func(id, snapID, p string) error {
		v, err := s.cp.SnapshotView(r.Context(), tenantOf(r), id, snapID)
		if err != nil {
			return err
		}
		defer v.Close()
		// Streamed: a large file of the layer is read from the snapshot store again, not held.
		rc, size, err := v.Open(p, controlplane.MaxSnapshotFileBytes)
		if err != nil {
			return err
		}
		defer rc.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		w.WriteHeader(http.StatusOK)
		if _, err := io.Copy(w, rc); err != nil {
			// The status is sent: the client sees a body shorter than its Content-Length.
			s.log.Warn("read snapshot file: cut short", "session", id, "snapshot", snapID, "err", err)
		}
		return nil
	})
}

func (s *Server) listSnapshotFiles(w http.ResponseWriter, r *http.Request) {
	s.snapshotCall(w, r, func(id, snapID, p string) error {
		v, err := s.cp.SnapshotView(r.Context(), tenantOf(r), id, snapID)
		if err != nil {
			return err
		}
		defer v.Close()
		entries, err := v.ReadDir(p)
		if err != nil {
			return err
		}
		out := wire.FileList{Entries: make([]wire.FileInfo, 0, len(entries))}
		for _, e := range entries {
			out.Entries = append(out.Entries, wire.FileInfo{Name: path.Base(e.Path), Path: e.Path, Type: e.Type, Size: e.Size,
				Mode: fmt.Sprintf("%04o", e.Mode.Perm()), ModTime: e.ModTime, Target: e.Target})
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

func (s *Server) diffSnapshots(w http.ResponseWriter, r *http.Request) {
	if err := onlyQuery(r, "from", "to", "path"); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	id, err := sessionID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	q := r.URL.Query()
	from, to := q.Get("from"), q.Get("to")
	for _, v := range []struct{ name, id string }{{"query parameter from", from}, {"query parameter to", to}} {
		if err := checkSnapshotID(v.name, v.id); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	out := wire.SnapshotDiff{From: from, To: to}
	if q.Has("path") {
		p, err := filePath(r, "path")
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
		diff, ok, err := s.cp.DiffSnapshotFile(r.Context(), tenantOf(r), id, from, to, p)
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
		out.Path, out.Unified, out.Binary = p, diff, !ok
		writeJSON(w, http.StatusOK, out)
		return
	}
	changes, truncated, err := s.cp.DiffSnapshots(r.Context(), tenantOf(r), id, from, to)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out.Changes, out.Truncated = make([]wire.FileChange, 0, len(changes)), truncated
	for _, c := range changes {
		out.Changes = append(out.Changes, wire.FileChange{Path: c.Path, Kind: c.Kind, Type: c.Type, OldSize: c.OldSize, NewSize: c.NewSize})
	}
	writeJSON(w, http.StatusOK, out)
}

func retentionSettings(own store.RetentionSpec, eff retention.Policy) wire.RetentionSettings {
	out := wire.RetentionSettings{Effective: wire.Retention{KeepAllSeconds: int64(eff.KeepAll / time.Second),
		KeepHourlySeconds: int64(eff.KeepHourly / time.Second), KeepDailySeconds: int64(eff.KeepDaily / time.Second)}}
	if r := fromRetention(own); r != nil {
		out.Tenant = *r
	}
	return out
}

func (s *Server) getRetention(w http.ResponseWriter, r *http.Request) {
	own, eff, err := s.cp.TenantRetention(r.Context(), tenantOf(r))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, retentionSettings(own, eff))
}

func (s *Server) setRetention(w http.ResponseWriter, r *http.Request) {
	var req wire.Retention
	if _, err := readJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	own, eff, err := s.cp.SetTenantRetention(r.Context(), tenantOf(r), toRetention(&req))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, retentionSettings(own, eff))
}
