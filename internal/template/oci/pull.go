package oci

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// PullOptions say how to reach a registry.
type PullOptions struct {
	// Insecure allows a registry that answers plain HTTP (or TLS with a certificate this host does not
	// trust). Without it, only HTTPS with a trusted certificate is spoken, loopback and private
	// addresses included.
	Insecure bool
	// Username and Password, if Username is set, are sent as basic credentials (to the registry's
	// token service, or to the registry itself).
	Username string
	Password []byte
}

// ErrPlainHTTP is returned when a registry would be reached over plain HTTP without Insecure.
var ErrPlainHTTP = errors.New("plain HTTP to a registry not named insecure")

// Pull fetches the image ref names from its registry (linux/amd64 of a multi-platform index), unpacks
// the layers the store lacks, as Import does, and records it.
func (s *Store) Pull(ctx context.Context, ref string, opts PullOptions) (Image, error) {
	var nopts []name.Option
	if opts.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nopts...)
	if err != nil {
		return Image{}, fmt.Errorf("image reference %q: %v: %w", ref, err, errdefs.ErrInvalidArgument)
	}
	base := remote.DefaultTransport.(*http.Transport).Clone()
	base.ResponseHeaderTimeout = 2 * time.Minute
	if opts.Insecure {
		base.TLSClientConfig.InsecureSkipVerify = true //nolint:gosec // the operator named this registry insecure
	}
	ropts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}),
		remote.WithTransport(tlsOnly{base: base, insecure: opts.Insecure}),
	}
	if opts.Username != "" {
		ropts = append(ropts, remote.WithAuth(&authn.Basic{Username: opts.Username, Password: string(opts.Password)}))
	}
	img, err := remote.Image(r, ropts...)
	if err != nil {
		return Image{}, pullErr(r, err)
	}
	s.gcMu.RLock()
	out, err := s.add(ctx, img)
	s.gcMu.RUnlock()
	if err != nil {
		return Image{}, pullErr(r, err)
	}
	return out, nil
}

// tlsOnly refuses plain HTTP unless the registry was named insecure. go-containerregistry falls back to
// HTTP for loopback and private addresses by itself; a registry there must be named insecure too.
type tlsOnly struct {
	base     http.RoundTripper
	insecure bool
}

func (t tlsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" && !t.insecure {
		return nil, fmt.Errorf("%s answers only over plain HTTP; pull with insecure to allow it: %w", req.URL.Host, ErrPlainHTTP)
	}
	return t.base.RoundTrip(req)
}

// pullErr says what a failed pull of r means for the caller.
func pullErr(r name.Reference, err error) error {
	var terr *transport.Error
	switch {
	case errors.Is(err, ErrPlainHTTP):
		return fmt.Errorf("pull %s: %w: %w", r, err, errdefs.ErrFailedPrecondition)
	case errors.As(err, &terr) && (terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden):
		return fmt.Errorf("pull %s: the registry refused the credentials (%d): %w", r, terr.StatusCode, errdefs.ErrPermissionDenied)
	case errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound:
		return fmt.Errorf("pull %s: the registry has no such image: %w", r, errdefs.ErrNotFound)
	case errors.Is(err, errdefs.ErrInvalidArgument), errors.Is(err, ErrBadLayer):
		return fmt.Errorf("pull %s: %w", r, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("pull %s: %w", r, err)
	}
	return fmt.Errorf("pull %s: %v: %w", r, err, errdefs.ErrUnavailable)
}
