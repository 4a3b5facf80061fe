package api

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/httperr"
)

// AccessRecheckInterval is how often every request in progress (streams above all: exec and attach
// streams, PTYs, envd's process streams and watches, code runs, tunnels and port upgrades) has its
// credential checked again. A revoked or expired key or token, a disabled tenant, or (for a port) a port
// that no longer opens to it ends the request within about this long, on every replica: each checks the
// Store itself. A revoke through this replica is checked at once.
const AccessRecheckInterval = time.Second

// accessWatch ends the requests whose credential stops holding. Requests are held by credential, so
// that a thousand streams of one token cost one check a round. Its loop runs while it holds anything.
type accessWatch struct {
	// auth checks a credential as at the start of a request.
	auth  func(ctx context.Context, cred string) (controlplane.Principal, error)
	every time.Duration
	log   *slog.Logger

	mu sync.Mutex
	// holds are the requests in progress by credential; guarded by mu.
	holds map[string]map[*accessHold]struct{}
	// wake, while the loop runs, asks it for a round now (or to stop, once nothing is held); nil while
	// it does not run. Guarded by mu.
	wake chan struct{}
}

// accessHold is one request held to its credential.
type accessHold struct {
	// still, if not nil, checks the credential's fresh principal further (a port it must still reach).
	still  func(ctx context.Context, p controlplane.Principal) error
	cancel context.CancelCauseFunc

	mu sync.Mutex
	// ended is set once the hold was ended; guarded by mu.
	ended bool
	// hooks run, in order, before the request's context is cancelled; guarded by mu.
	hooks []func(error)
}

type accessHoldKey struct{}

// hold holds the request of ctx to cred (which authenticated it a moment ago) until release is called:
// the context it returns is cancelled, with an *apiutil.AccessEndedError as its cause, once cred or still stop
// holding. An empty cred is held to nothing.
func (w *accessWatch) hold(ctx context.Context, cred string, still func(context.Context, controlplane.Principal) error) (context.Context, func()) {
	if cred == "" {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	h := &accessHold{still: still, cancel: cancel}
	w.mu.Lock()
	if w.holds == nil {
		w.holds = map[string]map[*accessHold]struct{}{}
	}
	if w.holds[cred] == nil {
		w.holds[cred] = map[*accessHold]struct{}{}
	}
	w.holds[cred][h] = struct{}{}
	if w.wake == nil {
		w.wake = make(chan struct{}, 1)
		go w.loop(w.wake)
	}
	w.mu.Unlock()
	return context.WithValue(ctx, accessHoldKey{}, h), func() {
		w.mu.Lock()
		delete(w.holds[cred], h)
		if len(w.holds[cred]) == 0 {
			delete(w.holds, cred)
		}
		if len(w.holds) == 0 {
			w.kickLocked()
		}
		w.mu.Unlock()
		cancel(context.Canceled)
	}
}

// onAccessEnd adds f to what runs, with the reason, when the access of ctx's request ends, before its
// context is cancelled: a stream says why it ends before it is cut. f runs at most once, and not at
// all for a request that ends otherwise. Outside a held request it does nothing.
func onAccessEnd(ctx context.Context, f func(reason error)) {
	h, _ := ctx.Value(accessHoldKey{}).(*accessHold)
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ended {
		h.hooks = append(h.hooks, f)
	}
}

// end ends the hold's request for reason: the hooks, then the cancel.
func (h *accessHold) end(reason error) {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended = true
	hooks := h.hooks
	h.hooks = nil
	h.mu.Unlock()
	for _, f := range hooks {
		f(reason)
	}
	h.cancel(&apiutil.AccessEndedError{Err: reason})
}

// kick asks for a round of checks now: a credential was revoked through this replica.
func (w *accessWatch) kick() {
	w.mu.Lock()
	w.kickLocked()
	w.mu.Unlock()
}

func (w *accessWatch) kickLocked() {
	if w.wake != nil {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// loop checks every held credential each round, until nothing is held.
func (w *accessWatch) loop(wake chan struct{}) {
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-wake:
		}
		w.mu.Lock()
		if len(w.holds) == 0 {
			w.wake = nil
			w.mu.Unlock()
			return
		}
		round := make(map[string][]*accessHold, len(w.holds))
		for cred, hs := range w.holds {
			for h := range hs {
				round[cred] = append(round[cred], h)
			}
		}
		w.mu.Unlock()
		for cred, hs := range round {
			w.check(cred, hs)
		}
	}
}

// check checks cred once and ends the holds it no longer lets through. A check that fails for a
// passing reason (the Store unreachable) ends nothing.
func (w *accessWatch) check(cred string, hs []*accessHold) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := w.auth(ctx, cred)
	if err != nil {
		if refused(err) {
			w.log.Info("requests ended: their credential no longer holds", "requests", len(hs), "err", err)
			for _, h := range hs {
				go h.end(err)
			}
		}
		return
	}
	for _, h := range hs {
		if h.still == nil {
			continue
		}
		if err := h.still(ctx, p); err != nil && refused(err) {
			w.log.Info("request ended: its access no longer holds", "err", err)
			go h.end(err)
		}
	}
}

// refused reports whether err says that access is refused (as opposed to a failure to find out).
func refused(err error) bool {
	return httperr.Status(err) < 500 && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, errdefs.ErrResourceExhausted)
}

// closeReason is apiutil.AccessMessage cut to fit a WebSocket close frame's reason (123 bytes).
func closeReason(reason error) string {
	msg := apiutil.AccessMessage(reason)
	if len(msg) > 123 {
		msg = msg[:120] + "..."
	}
	return msg
}
