package api

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/httperr"
)

// maxJSONBody caps every JSON request body.
const maxJSONBody = 1 << 20

// clientErr returns an error whose message the client sees, matching sentinel (apiutil.ClientErr).
func clientErr(sentinel error, format string, args ...any) error {
	return apiutil.ClientErr(sentinel, format, args...)
}

// writeError converts err to the API's error body, exactly once, at the edge. Errors that match a client
// sentinel (not found, invalid argument, …) carry their message; internal errors are logged with their
// full text and reported to the client without it.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	writeJSON(w, httperr.Status(err), wire.ErrorBody{Error: apiutil.ErrorDetail(log, r, err)})
}

// boolParam reads the query parameter name: false if absent.
func boolParam(q url.Values, name string) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, clientErr(errdefs.ErrInvalidArgument, "%s must be true or false, not %q", name, truncate(v, 16))
	}
	return b, nil
}

// writeJSON answers with status and v as JSON (apiutil.WriteJSON).
func writeJSON(w http.ResponseWriter, status int, v any) { apiutil.WriteJSON(w, status, v) }

// decodeJSON reads a JSON body into v: at most maxJSONBody bytes, unknown fields rejected, exactly one
// value. Every failure is an invalid-argument or too-large error with a message naming the problem.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return clientErr(errdefs.ErrInvalidArgument, "content type must be application/json, not %q", ct)
	}
	body := http.MaxBytesReader(w, r.Body, maxJSONBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &mbe):
			return clientErr(errdefs.ErrTooLarge, "request body is larger than %d bytes", maxJSONBody)
		case errors.Is(err, io.EOF):
			return clientErr(errdefs.ErrInvalidArgument, "request body is empty; want a JSON object")
		case errors.As(err, &se):
			return clientErr(errdefs.ErrInvalidArgument, "malformed JSON at byte %d: %v", se.Offset, err)
		case errors.As(err, &te):
			return clientErr(errdefs.ErrInvalidArgument, "field %q: want %s, got JSON %s", te.Field, te.Type, te.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return clientErr(errdefs.ErrInvalidArgument, "unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
		default:
			return clientErr(errdefs.ErrInvalidArgument, "malformed JSON: %v", err)
		}
	}
	if dec.More() {
		return clientErr(errdefs.ErrInvalidArgument, "request body holds more than one JSON value")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return clientErr(errdefs.ErrTooLarge, "request body is larger than %d bytes", maxJSONBody)
		}
		return clientErr(errdefs.ErrInvalidArgument, "unexpected data after the JSON value")
	}
	return nil
}

func jsonEncode(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
