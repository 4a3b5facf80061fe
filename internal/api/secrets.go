package api

import (
	"net/http"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/secrets"
)

func toSecret(m secrets.Metadata) wire.Secret {
	return wire.Secret{Name: m.Name, Version: m.Version, CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt}
}

// secretName returns the {name} of the path, checked.
func secretName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	if err := secrets.ValidateName(name); err != nil {
		return "", clientErr(errdefs.ErrInvalidArgument, "invalid secret name %q: want 1-128 letters, digits or _.-", truncate(name, 64))
	}
	return name, nil
}

func checkSecretValue(v string) error {
	if v == "" {
		return clientErr(errdefs.ErrInvalidArgument, "value is required")
	}
	if len(v) > secrets.DefaultMaxValueSize {
		return clientErr(errdefs.ErrTooLarge, "value is %d bytes; at most %d are allowed", len(v), secrets.DefaultMaxValueSize)
	}
	return nil
}

func (s *Server) createSecret(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateSecretRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if err := secrets.ValidateName(req.Name); err != nil {
		writeError(w, r, s.log, clientErr(errdefs.ErrInvalidArgument, "invalid secret name %q: want 1-128 letters, digits or _.-", truncate(req.Name, 64)))
		return
	}
	if err := checkSecretValue(req.Value); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	m, err := s.cp.CreateSecret(r.Context(), tenantOf(r), req.Name, []byte(req.Value))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.Header().Set("Location", "/v1/secrets/"+m.Name)
	writeJSON(w, http.StatusCreated, toSecret(m))
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	if err := onlyQuery(r); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	ms, err := s.cp.ListSecrets(r.Context(), tenantOf(r))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := wire.SecretList{Secrets: make([]wire.Secret, 0, len(ms))}
	for _, m := range ms {
		out.Secrets = append(out.Secrets, toSecret(m))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSecret(w http.ResponseWriter, r *http.Request) {
	name, err := secretName(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	m, err := s.cp.GetSecret(r.Context(), tenantOf(r), name)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, toSecret(m))
}

func (s *Server) updateSecret(w http.ResponseWriter, r *http.Request) {
	name, err := secretName(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var req wire.UpdateSecretRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if err := checkSecretValue(req.Value); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	m, err := s.cp.UpdateSecret(r.Context(), tenantOf(r), name, []byte(req.Value))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, toSecret(m))
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	name, err := secretName(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if err := s.cp.DeleteSecret(r.Context(), tenantOf(r), name); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
