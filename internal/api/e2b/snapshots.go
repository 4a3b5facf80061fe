package e2b

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/store"
)

// E2B's snapshots are Airlock's kept snapshots (controlplane.KeepSnapshot): a sandbox's memory,
// processes and files saved apart from it, until deleted, which new sandboxes start from
// (Sandbox.create(snapshotId)). The snapshot's ID is the kept snapshot's session ID; its names are its
// name, if it has one, which creates find too.

// e2bSnapshotInfo is E2B's SnapshotInfo.
type e2bSnapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func e2bSnapshotOf(kept store.Session) e2bSnapshotInfo {
	names := []string{}
	if n := kept.Metadata[controlplane.KeptNameMetadataKey]; n != "" {
		names = append(names, n)
	}
	return e2bSnapshotInfo{SnapshotID: kept.ID, Names: names}
}

// e2bCreateSnapshot is POST /sandboxes/{id}/snapshots {name}: the sandbox runs on.
func (s *controlPlane) e2bCreateSnapshot(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name *string `json:"name"`
	}
	if err := decodeE2BBody(w, r, &req, true); err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	se, err := s.e2bSession(r)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	name := ""
	if req.Name != nil {
		name = *req.Name
	}
	kept, err := s.cp.KeepSnapshot(r.Context(), apiutil.TenantOf(r), se.ID, name)
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	apiutil.WriteJSON(w, http.StatusCreated, e2bSnapshotOf(kept))
}

// e2bListSnapshots is GET /snapshots?sandboxID=&name=&limit=&nextToken=: the tenant's kept snapshots,
// oldest first; name matches a name or an ID.
func (s *controlPlane) e2bListSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.SessionFilter{States: []store.SessionState{store.SessionPaused, store.SessionFailed}, Limit: e2bMaxList, Cursor: q.Get("nextToken"),
		Metadata: map[string]string{controlplane.KeptMetadataKey: controlplane.KeptMetadataValue}}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > e2bMaxList {
			e2bError(w, r, s.log, apiutil.ClientErr(errdefs.ErrInvalidArgument, "limit must be between 1 and %d, got %q", e2bMaxList, apiutil.Truncate(v, 16)))
			return
		}
		f.Limit = n
	}
	of := q.Get("sandboxID")
	if of != "" {
		f.Metadata[controlplane.KeptOfMetadataKey] = of
	}
	out := []e2bSnapshotInfo{}
	name := q.Get("name")
	if apiutil.SessionIDPattern.MatchString(name) {
		// An ID names one snapshot.
		kept, err := s.e2bKept(r, name)
		switch {
		case err == nil && (of == "" || kept.Metadata[controlplane.KeptOfMetadataKey] == of):
			out = append(out, e2bSnapshotOf(kept))
		case err != nil && !errors.Is(err, errdefs.ErrNotFound):
			e2bError(w, r, s.log, err)
			return
		}
		apiutil.WriteJSON(w, http.StatusOK, out)
		return
	}
	if name != "" {
		f.Metadata[controlplane.KeptNameMetadataKey] = name
	}
	ses, next, err := s.cp.ListSessions(r.Context(), apiutil.TenantOf(r), f)
	if err != nil {
		if errors.Is(err, errdefs.ErrInvalidArgument) {
			err = apiutil.ClientErr(errdefs.ErrInvalidArgument, "invalid nextToken")
		}
		e2bError(w, r, s.log, err)
		return
	}
	for _, se := range ses {
		out = append(out, e2bSnapshotOf(se))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	apiutil.WriteJSON(w, http.StatusOK, out)
}

// e2bDeleteTemplate is DELETE /templates/{id}, which the SDKs' deleteSnapshot calls: it deletes a kept
// snapshot (by ID or name). Templates themselves are the operator's, on /v1.
func (s *controlPlane) e2bDeleteTemplate(w http.ResponseWriter, r *http.Request) {
	kept, err := s.e2bKept(r, r.PathValue("id"))
	if err == nil {
		err = s.cp.DeleteSession(r.Context(), apiutil.TenantOf(r), kept.ID)
	}
	if err != nil {
		e2bError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bKept finds the tenant's kept snapshot ref names: by its ID, or the newest of that name; anything
// else is not found.
func (s *controlPlane) e2bKept(r *http.Request, ref string) (store.Session, error) {
	notFound := apiutil.ClientErr(errdefs.ErrNotFound, "snapshot %q doesn't exist or you don't have access to it", apiutil.Truncate(ref, 64))
	if apiutil.SessionIDPattern.MatchString(ref) {
		se, err := s.cp.GetSession(r.Context(), apiutil.TenantOf(r), ref)
		switch {
		case errors.Is(err, errdefs.ErrNotFound) || (err == nil && (!controlplane.IsKept(se) || se.State == store.SessionDeleting || se.State == store.SessionDeleted)):
			return store.Session{}, notFound
		case err != nil:
			return store.Session{}, err
		}
		return se, nil
	}
	if ref == "" || len(ref) > 63 {
		return store.Session{}, notFound
	}
	ses, _, err := s.cp.ListSessions(r.Context(), apiutil.TenantOf(r), store.SessionFilter{States: []store.SessionState{store.SessionPaused, store.SessionFailed},
		Limit: 1, Descending: true, Metadata: map[string]string{controlplane.KeptMetadataKey: controlplane.KeptMetadataValue, controlplane.KeptNameMetadataKey: ref}})
	if err != nil {
		return store.Session{}, err
	}
	if len(ses) == 0 {
		return store.Session{}, notFound
	}
	return ses[0], nil
}

// e2bCreateFromSnapshot creates a sandbox restored from kept snapshot kept, with the create's
// timeout, lifecycle and metadata; its egress policy is the snapshot's unless the create sets one.
func (s *controlPlane) e2bCreateFromSnapshot(w http.ResponseWriter, r *http.Request, kept store.Session, req *e2bNewSandbox, timeout int,
	onTimeout store.SessionTimeoutAction, p policy.Policy) {
	if len(req.EnvVars) > 0 {
		e2bError(w, r, s.log, apiutil.ClientErr(errdefs.ErrInvalidArgument,
			"envVars cannot be set on a sandbox started from snapshot %s: its processes and their environment are the snapshot's", kept.ID))
		return
	}
	fk := controlplane.FromKeptRequest{Metadata: req.Metadata, TimeoutSeconds: timeout, OnTimeout: onTimeout,
		AutoResume: req.AutoResume != nil && req.AutoResume.Enabled}
	if req.AllowInternetAccess != nil || req.Network != nil {
		fk.Network = &p
	}
	se, err := s.cp.CreateFromKept(r.Context(), apiutil.TenantOf(r), kept.ID, fk)
	s.e2bCreated(w, r, se, err)
}
