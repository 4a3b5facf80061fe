// Package nodeapi carries the node API between hosts: a control plane calls a node in another process
// (Client, which implements controlplane.Node) and the node serves those calls (Handler). Both ends
// authenticate with certificates the cluster's CA issued (internal/cluster): only a control plane may call
// a node.
//
// Calls are JSON over HTTPS (HTTP/2 where it can). A sandbox's daemon channel and a connection into one
// of its ports are HTTP/1.1 upgrades: after the 101 answer the TLS connection carries the daemon's
// protocol (served by the node's link.Mux, so many control planes share one daemon connection) or the
// port's bytes. Checkpoint images travel as tar streams, which the receiving side unpacks with care
// (regular files and directories only, every name inside the image directory).
package nodeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/httperr"
	"github.com/airlockrun/airlock/internal/nodecontract"
)

// Backend is what a node serves: *node.Local.
type Backend interface {
	nodecontract.Node
	// LinkMux returns the Mux of the sandbox's daemon connection, which a control plane's link joins.
	LinkMux(ctx context.Context, id string) (*link.Mux, error)
}

// The upgrade protocols of the streams.
const (
	protoLink = "airlock-link/1"
	protoPort = "airlock-tcp/1"
)

// maxJSON bounds a JSON body either end reads (a policy, a recover list, a page of flows).
const maxJSON = 16 << 20

// errorBody is a failed call's answer.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeError answers err with its errdefs code and message.
func writeError(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httperr.Status(err))
	_ = json.NewEncoder(w).Encode(errorBody{Code: errdefs.Code(err), Message: err.Error()})
}

// reply answers v as JSON (nothing if nil), or err.
func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if v == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	_ = json.NewEncoder(w).Encode(v)
}

// verifiedPeer returns the identity of the request's verified client certificate, which must have
// role.
func verifiedPeer(r *http.Request, role string) (cluster.Identity, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return cluster.Identity{}, fmt.Errorf("no verified client certificate: %w", errdefs.ErrPermissionDenied)
	}
	id, err := cluster.PeerIdentity(r.TLS)
	if err != nil || id.Role != role {
		return cluster.Identity{}, fmt.Errorf("only a %s of the cluster may call here: %w", role, errdefs.ErrPermissionDenied)
	}
	return id, nil
}

// remoteError is a node's (or control plane's) error, carrying the sentinel its code names.
type remoteError struct {
	msg string
	err error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.err }

// readError turns a failed answer back into an error wrapping the sentinel its code names.
func readError(resp *http.Response) error {
	var b errorBody
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(body, &b) != nil || b.Code == "" {
		return &remoteError{msg: fmt.Sprintf("node API: %s: %.200q", resp.Status, body), err: errdefs.ErrUnavailable}
	}
	return &remoteError{msg: b.Message, err: errdefs.FromCode(b.Code)}
}

// send sends a request to peer (named in errors) and returns a successful answer; a failed one
// becomes an error wrapping the sentinel its code names, one that was not answered ErrUnavailable.
func send(ctx context.Context, hc *http.Client, peer, method, url string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%s: %v: %w", peer, err, errdefs.ErrUnavailable)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return resp, nil
}

// callJSON sends in (if not nil) as JSON and decodes the JSON answer into out (if not nil).
func callJSON(ctx context.Context, hc *http.Client, peer, method, url string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	resp, err := send(ctx, hc, peer, method, url, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxJSON))
		return nil
	}
	if err := decode(resp.Body, out); err != nil {
		return fmt.Errorf("%s: %s %s: %v: %w", peer, method, url, err, errdefs.ErrUnavailable)
	}
	return nil
}

// decode reads a JSON body of at most maxJSON bytes into v.
func decode(r io.Reader, v any) error {
	dec := json.NewDecoder(io.LimitReader(r, maxJSON))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}
