package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/api/apiutil"
	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// fakeCreds answers Authenticate from a table: a credential's error, or a principal.
type fakeCreds struct {
	mu     sync.Mutex
	errs   map[string]error // guarded by mu
	checks map[string]int   // guarded by mu
}

func (f *fakeCreds) auth(_ context.Context, cred string) (controlplane.Principal, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checks[cred]++
	if err := f.errs[cred]; err != nil {
		return controlplane.Principal{}, err
	}
	return controlplane.Principal{TenantID: "tn_" + cred}, nil
}

func (f *fakeCreds) set(cred string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[cred] = err
}

func newWatch(every time.Duration) (*accessWatch, *fakeCreds) {
	f := &fakeCreds{errs: map[string]error{}, checks: map[string]int{}}
	return &accessWatch{auth: f.auth, every: every, log: slog.New(slog.DiscardHandler)}, f
}

func ended(ctx context.Context, within time.Duration) bool {
	select {
	case <-ctx.Done():
		return true
	case <-time.After(within):
		return false
	}
}

func TestAccessWatchEndsRevoked(t *testing.T) {
	w, f := newWatch(time.Hour) // rounds only when kicked
	a1, rel1 := w.hold(t.Context(), "a", nil)
	defer rel1()
	a2, rel2 := w.hold(t.Context(), "a", nil)
	defer rel2()
	b, relB := w.hold(t.Context(), "b", nil)
	defer relB()
	var order []string
	var mu sync.Mutex
	onAccessEnd(a1, func(reason error) {
		mu.Lock()
		defer mu.Unlock()
		// The hook runs before the context is cancelled: a stream can still say why it ends.
		order = append(order, fmt.Sprintf("hook cancelled=%v reason=%v", a1.Err() != nil, reason))
	})

	// A passing failure to check ends nothing.
	f.set("a", fmt.Errorf("store down: %w", errdefs.ErrUnavailable))
	w.kick()
	if ended(a1, 200*time.Millisecond) {
		t.Fatalf("a request ended on an unavailable store: %v", context.Cause(a1))
	}

	revoked := fmt.Errorf("access token at_a… was revoked: %w", errdefs.ErrUnauthenticated)
	f.set("a", revoked)
	w.kick()
	for _, ctx := range []context.Context{a1, a2} {
		if !ended(ctx, 5*time.Second) {
			t.Fatal("a request of a revoked credential did not end")
		}
		ae := apiutil.AccessEnded(ctx)
		if ae == nil || !errors.Is(ae, errdefs.ErrUnauthenticated) {
			t.Errorf("cause = %v; want an AccessEndedError wrapping the revoke", context.Cause(ctx))
		}
	}
	mu.Lock()
	if want := fmt.Sprintf("hook cancelled=false reason=%v", revoked); len(order) != 1 || order[0] != want {
		t.Errorf("hooks ran %q; want once: %q", order, want)
	}
	mu.Unlock()
	if got := closeReason(revoked); got != "access ended: access token at_a… was revoked" {
		t.Errorf("closeReason = %q", got)
	}
	// Positive control: another credential's request goes on.
	if ended(b, 200*time.Millisecond) {
		t.Errorf("the request of a valid credential ended: %v", context.Cause(b))
	}
}

func TestAccessWatchStill(t *testing.T) {
	w, _ := newWatch(10 * time.Millisecond)
	var mu sync.Mutex
	var closed bool
	still := func(context.Context, controlplane.Principal) error {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return fmt.Errorf("port 8080 is private now: %w", errdefs.ErrPermissionDenied)
		}
		return nil
	}
	ctx, release := w.hold(t.Context(), "a", still)
	defer release()
	other, releaseOther := w.hold(t.Context(), "a", nil)
	defer releaseOther()
	if ended(ctx, 100*time.Millisecond) {
		t.Fatal("ended while still held")
	}
	mu.Lock()
	closed = true
	mu.Unlock()
	if !ended(ctx, 5*time.Second) {
		t.Fatal("a request whose further check fails did not end")
	}
	if ended(other, 100*time.Millisecond) {
		t.Error("the credential's other request ended with it")
	}
}

func TestAccessWatchRounds(t *testing.T) {
	w, f := newWatch(20 * time.Millisecond)
	before := runtime.NumGoroutine()
	var rels []func()
	for range 50 {
		_, rel := w.hold(t.Context(), "same", nil)
		rels = append(rels, rel)
	}
	time.Sleep(200 * time.Millisecond)
	f.mu.Lock()
	n := f.checks["same"]
	f.mu.Unlock()
	// About ten rounds, one check each: never one check per request.
	if n == 0 || n > 20 {
		t.Errorf("50 requests of one credential over about 10 rounds: %d checks; want one a round", n)
	}
	for _, rel := range rels {
		rel()
	}
	// With nothing held the loop stops.
	stopped := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.wake == nil && len(w.holds) == 0
	}
	deadline := time.Now().Add(5 * time.Second)
	for (!stopped() || runtime.NumGoroutine() > before) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !stopped() {
		t.Error("after every release the loop still runs")
	}
	if g := runtime.NumGoroutine(); g > before {
		t.Errorf("%d goroutines after every release; want %d (the loop stops)", g, before)
	}
}

// TestAccessWatchReleased: a request that ends by itself is not ended for its access later, and its
// hooks do not run.
func TestAccessWatchReleased(t *testing.T) {
	w, f := newWatch(time.Hour)
	ctx, release := w.hold(t.Context(), "a", nil)
	ran := false
	onAccessEnd(ctx, func(error) { ran = true })
	release()
	f.set("a", errdefs.ErrUnauthenticated)
	w.kick()
	time.Sleep(50 * time.Millisecond)
	if ran || apiutil.AccessEnded(ctx) != nil {
		t.Errorf("a released request: hook ran %v, cause %v; want neither", ran, context.Cause(ctx))
	}
}
