package api

import (
	"context"
	"net/http"
	"regexp"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

var (
	snapshotIDPattern = regexp.MustCompile(`^sn_[a-z2-7]{26}$`)
)

// sessionID returns the {id} of the path, or an invalid-argument error.
func sessionID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !apiutil.SessionIDPattern.MatchString(id) {
		return "", clientErr(errdefs.ErrInvalidArgument, "invalid session id %q: want se_ followed by 26 characters", truncate(id, 64))
	}
	return id, nil
}

// tracked tells the control plane while the work h does on the sandbox {id} is in progress, so that
// no rolling snapshot or idle pause cuts it off (viaSession does the same for work on a session).
func (s *Server) tracked(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		defer s.cp.BeginWork(r.Context(), tenantOf(r), "", r.PathValue("id"))()
		h(w, r)
	}
}

// viaSession serves sandbox work addressed to a session: it finds (or, if the session is paused and
// resumes automatically, makes) the session's sandbox, records the activity, and hands the request to h
// as if it named that sandbox.
func (s *Server) viaSession(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := sessionID(r)
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
		sb, err := s.cp.SessionSandbox(r.Context(), tenantOf(r), id)
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
		r.SetPathValue("id", sb)
		defer s.cp.BeginWork(r.Context(), tenantOf(r), id, sb)()
		h(w, r)
	}
}

// toSession is se for the API, with the node its sandbox runs on.
func (s *Server) toSession(ctx context.Context, tenantID string, se store.Session) wire.Session {
	out := sessionOf(se)
	if se.SandboxID != "" {
		if sb, err := s.cp.GetSandbox(ctx, tenantID, se.SandboxID); err == nil {
			out.Node = sb.NodeID
		}
	}
	return out
}

// sessionOf is se for the API.
func sessionOf(se store.Session) wire.Session {
	out := wire.Session{
		ID: se.ID, State: string(se.State), Reason: se.Reason, Template: se.Spec.Template,
		CPU: se.Spec.CPUMillicores, MemoryMB: se.Spec.MemoryMB, DiskMB: se.Spec.DiskMB, Metadata: se.Metadata,
		IdleTimeoutSeconds: se.IdleTimeoutSeconds, AutoResume: se.AutoResume, SandboxID: se.SandboxID,
		RollingIntervalSeconds: se.RollingIntervalSeconds, Retention: fromRetention(se.Retention),
		HeadSnapshotID: se.HeadSnapshotID, ParentSessionID: se.ParentSessionID, ForkedFromSnapshotID: se.ForkedFromSnapshotID,
		CreatedAt: se.CreatedAt, UpdatedAt: se.UpdatedAt, LastActivityAt: se.LastActivityAt, PausedAt: se.PausedAt,
		TimeoutSeconds: se.TimeoutSeconds, OnTimeout: string(se.OnTimeout), EndsAt: se.EndsAt,
	}
	if out.OnTimeout == "" {
		out.OnTimeout = string(store.SessionTimeoutDelete)
	}
	if out.Metadata == nil {
		out.Metadata = map[string]string{}
	}
	out.Runtime, out.RuntimeReason, out.Abilities = runtimeOf(out.Metadata), out.Metadata[controlplane.RuntimeReasonMetadataKey], abilitiesOf(out.Metadata)
	if se.Spec.Runtime != "" {
		out.Runtime = se.Spec.Runtime
	}
	if p, err := controlplane.SessionNetworkPolicy(se); err == nil && len(se.Spec.NetworkPolicy) > 0 {
		np := fromPolicy(p)
		out.Network = &np
	}
	return out
}

// orKind is a snapshot's kind: memory for those recorded before kinds were.
func orKind(k string) string {
	if k == "" {
		return controlplane.SnapshotKindMemory
	}
	return k
}

func toSnapshot(sn store.Snapshot) wire.Snapshot {
	return wire.Snapshot{ID: sn.ID, SessionID: sn.SessionID, ParentID: sn.ParentID, Name: sn.Name, Trigger: string(sn.Trigger),
		State: string(sn.State), Reason: sn.Reason, Pinned: sn.Pinned, LogicalBytes: sn.LogicalBytes, StoredBytes: sn.StoredBytes,
		CreatedAt: sn.CreatedAt, CompletedAt: sn.CompletedAt, Kind: orKind(sn.Meta[controlplane.SnapshotKindMeta])}
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateSessionRequest
	body, err := readJSON(w, r, &req)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.idempotent(w, r, "POST /v1/sessions", body, func() (int, any, string, error) {
		creq := controlplane.SessionRequest{
			CreateRequest: controlplane.CreateRequest{Template: req.Template, Env: req.Env, CPUMillicores: req.CPU,
				MemoryMB: req.MemoryMB, DiskMB: req.DiskMB, Metadata: req.Metadata, Runtime: req.Runtime,
				TimeoutSeconds: req.TimeoutSeconds},
			OnTimeout:              store.SessionTimeoutAction(req.OnTimeout),
			IdleTimeoutSeconds:     int(controlplane.DefaultIdleTimeout.Seconds()),
			AutoResume:             true,
			RollingIntervalSeconds: int(controlplane.DefaultRollingInterval.Seconds()),
			Retention:              toRetention(req.Retention),
		}
		if req.RollingIntervalSeconds != nil {
			creq.RollingIntervalSeconds = *req.RollingIntervalSeconds
		}
		if req.IdleTimeoutSeconds != nil {
			creq.IdleTimeoutSeconds = *req.IdleTimeoutSeconds
		}
		if req.AutoResume != nil {
			creq.AutoResume = *req.AutoResume
		}
		if req.Network != nil {
			p, err := toPolicy(*req.Network)
			if err != nil {
				return 0, nil, "", err
			}
			creq.Network = &p
		}
		se, err := s.cp.CreateSession(r.Context(), tenantOf(r), creq)
		if err != nil && se.ID == "" {
			return 0, nil, "", err
		}
		if err != nil {
			s.log.Error("create session", "session", se.ID, "err", err)
		}
		return http.StatusCreated, s.toSession(r.Context(), tenantOf(r), se), "/v1/sessions/" + se.ID, nil
	})
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	lq, err := parseListQuery(r, func(v string) bool { return store.SessionState(v).Valid() },
		"creating, running, pausing, paused, resuming, failed, deleting, deleted")
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	f := store.SessionFilter{Cursor: lq.cursor, Limit: lq.limit, Metadata: lq.metadata}
	for _, st := range lq.states {
		f.States = append(f.States, store.SessionState(st))
	}
	ses, next, err := s.cp.ListSessions(r.Context(), tenantOf(r), f)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := wire.SessionList{Sessions: make([]wire.Session, 0, len(ses)), NextCursor: next}
	for _, se := range ses {
		out.Sessions = append(out.Sessions, s.toSession(r.Context(), tenantOf(r), se))
	}
	writeJSON(w, http.StatusOK, out)
}

// sessionCall serves a call on one session that answers the session.
func (s *Server) sessionCall(w http.ResponseWriter, r *http.Request, call func(tenant, id string) (store.Session, error)) {
	id, err := sessionID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	se, err := call(tenantOf(r), id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, s.toSession(r.Context(), tenantOf(r), se))
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	s.sessionCall(w, r, func(tenant, id string) (store.Session, error) { return s.cp.GetSession(r.Context(), tenant, id) })
}

func (s *Server) pauseSession(w http.ResponseWriter, r *http.Request) {
	if err := onlyEmptyBody(r); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.sessionCall(w, r, func(tenant, id string) (store.Session, error) { return s.cp.PauseSession(r.Context(), tenant, id) })
}

func (s *Server) resumeSession(w http.ResponseWriter, r *http.Request) {
	if err := onlyEmptyBody(r); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.sessionCall(w, r, func(tenant, id string) (store.Session, error) { return s.cp.ResumeSession(r.Context(), tenant, id) })
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	id, err := sessionID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if err := s.cp.DeleteSession(r.Context(), tenantOf(r), id); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) forkSession(w http.ResponseWriter, r *http.Request) {
	id, err := sessionID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var req wire.ForkSessionRequest
	body, err := readJSON(w, r, &req)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if req.SnapshotID != "" {
		if err := checkSnapshotID("snapshot_id", req.SnapshotID); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	s.idempotent(w, r, "POST /v1/sessions/"+id+"/fork", body, func() (int, any, string, error) {
		forks, err := s.cp.ForkSession(r.Context(), tenantOf(r), id, req.Count, req.SnapshotID)
		if err != nil {
			return 0, nil, "", err
		}
		out := wire.ForkSessionResult{Sessions: make([]wire.Session, 0, len(forks))}
		for _, f := range forks {
			out.Sessions = append(out.Sessions, s.toSession(r.Context(), tenantOf(r), f))
		}
		return http.StatusCreated, out, "", nil
	})
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	id, err := sessionID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var req wire.CreateSnapshotRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &req); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	sn, err := s.cp.SnapshotSession(r.Context(), tenantOf(r), id, req.Name)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, toSnapshot(sn))
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	id, err := sessionID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	lq, err := parseListQuery(r, func(v string) bool { return store.SnapshotState(v).Valid() }, "writing, uploading, complete, failed")
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if len(lq.metadata) > 0 {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "snapshots have no metadata filter"))
		return
	}
	f := store.SnapshotFilter{Cursor: lq.cursor, Limit: lq.limit}
	for _, st := range lq.states {
		f.States = append(f.States, store.SnapshotState(st))
	}
	sns, next, err := s.cp.ListSnapshots(r.Context(), tenantOf(r), id, f)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := wire.SnapshotList{Snapshots: make([]wire.Snapshot, 0, len(sns)), NextCursor: next}
	for _, sn := range sns {
		out.Snapshots = append(out.Snapshots, toSnapshot(sn))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	id, snapID, err := sessionSnapshot(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	sn, err := s.cp.GetSnapshot(r.Context(), tenantOf(r), id, snapID)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, toSnapshot(sn))
}

// onlyEmptyBody refuses a body on a call that takes none.
func onlyEmptyBody(r *http.Request) error {
	if r.ContentLength > 0 {
		return clientErr(errdefs.ErrInvalidArgument, "this call takes no body")
	}
	return nil
}

func (s *Server) setSessionTimeout(w http.ResponseWriter, r *http.Request) {
	s.timeoutCall(w, r, sessionID, func(id string, secs int) (any, error) {
		se, err := s.cp.SetSessionTimeout(r.Context(), tenantOf(r), id, secs, false)
		return s.toSession(r.Context(), tenantOf(r), se), err
	})
}
