package api

import (
	"encoding/json"
	"net/http"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/policy"
)

// toPolicy converts the API's network policy into the gateway's; both share one JSON shape, and the
// gateway's decoding is the one that validates.
func toPolicy(p wire.NetworkPolicy) (policy.Policy, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return policy.Policy{}, clientErr(errdefs.ErrInvalidArgument, "network: %v", err)
	}
	var out policy.Policy
	if err := json.Unmarshal(b, &out); err != nil {
		return policy.Policy{}, clientErr(errdefs.ErrInvalidArgument, "network: %s", apiutil.TrimSentinel(err.Error(), err))
	}
	if err := out.Validate(); err != nil {
		return policy.Policy{}, clientErr(errdefs.ErrInvalidArgument, "network: %s", apiutil.TrimSentinel(err.Error(), err))
	}
	return out, nil
}

func fromPolicy(p policy.Policy) wire.NetworkPolicy {
	var out wire.NetworkPolicy
	b, _ := json.Marshal(p)
	_ = json.Unmarshal(b, &out)
	if out.Default == "" {
		out.Default = policy.ActionDeny
	}
	return out
}

func (s *Server) getNetwork(w http.ResponseWriter, r *http.Request) {
	id, err := sandboxID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	sb, err := s.cp.GetSandbox(r.Context(), tenantOf(r), id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	p, err := controlplane.NetworkPolicy(sb)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, fromPolicy(p))
}

func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request) {
	id, err := sandboxID(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var req wire.NetworkPolicy
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	p, err := toPolicy(req)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if _, err := s.cp.SetNetwork(r.Context(), tenantOf(r), id, p); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, fromPolicy(p))
}
