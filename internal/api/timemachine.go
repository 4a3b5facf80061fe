package api

import (
	"net/http"

	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// The time machine's routes: restore to a snapshot or a time, the timeline, pins.

func toRetention(r *airlock.Retention) store.RetentionSpec {
	if r == nil {
		return store.RetentionSpec{}
	}
	return store.RetentionSpec{KeepAllSeconds: r.KeepAllSeconds, KeepHourlySeconds: r.KeepHourlySeconds, KeepDailySeconds: r.KeepDailySeconds}
}

func fromRetention(r store.RetentionSpec) *airlock.Retention {
	if r == (store.RetentionSpec{}) {
		return nil
	}
	return &airlock.Retention{KeepAllSeconds: r.KeepAllSeconds, KeepHourlySeconds: r.KeepHourlySeconds, KeepDailySeconds: r.KeepDailySeconds}
}

// snapshotPathID returns the {snapshot} of the path, or an invalid-argument error.
func snapshotPathID(r *http.Request) (string, error) {
	id := r.PathValue("snapshot")
	if !snapshotIDPattern.MatchString(id) {
		return "", clientErr(errdefs.ErrInvalidArgument, "invalid snapshot id %q: want sn_ followed by 26 characters", truncate(id, 64))
	}
	return id, nil
}

func (s *Server) restoreSession(w http.ResponseWriter, r *http.Request) {
	id, err := sessionID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var req airlock.RestoreSessionRequest
	if _, err := readJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if req.SnapshotID != "" && !snapshotIDPattern.MatchString(req.SnapshotID) {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "invalid snapshot_id %q: want sn_ followed by 26 characters", truncate(req.SnapshotID, 64)))
		return
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
	writeJSON(w, http.StatusOK, toSession(se))
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
	out := airlock.Timeline{HeadSnapshotID: se.HeadSnapshotID, Snapshots: make([]airlock.Snapshot, 0, len(sns))}
	for _, sn := range sns {
		out.Snapshots = append(out.Snapshots, toSnapshot(sn))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) updateSnapshot(w http.ResponseWriter, r *http.Request) {
	id, err := sessionID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	snapID, err := snapshotPathID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var req airlock.UpdateSnapshotRequest
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
