package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

// TestCanTransition checks every pair of states against the state machine as the design writes it.
func TestCanTransition(t *testing.T) {
	const (
		c = store.StateCreating
		r = store.StateRunning
		g = store.StateStopping
		s = store.StateStopped
		f = store.StateFailed
	)
	allowed := map[[2]store.SandboxState]bool{
		{c, r}: true, {c, f}: true, {c, g}: true,
		{r, g}: true, {r, f}: true,
		{g, s}: true, {g, f}: true,
		{f, g}: true, {f, s}: true,
	}
	states := append(store.SandboxStates(), "", "paused")
	for _, from := range states {
		for _, to := range states {
			want := allowed[[2]store.SandboxState{from, to}]
			if got := from.CanTransition(to); got != want {
				t.Errorf("%q.CanTransition(%q) = %v; want %v", from, to, got, want)
			}
		}
	}
}

func TestValidAndTerminal(t *testing.T) {
	for _, s := range store.SandboxStates() {
		if !s.Valid() {
			t.Errorf("%q.Valid() = false; want true", s)
		}
		if got, want := s.Terminal(), s == store.StateStopped; got != want {
			t.Errorf("%q.Terminal() = %v; want %v", s, got, want)
		}
	}
	for _, s := range []store.SandboxState{"", "paused", "Running"} {
		if s.Valid() {
			t.Errorf("%q.Valid() = true; want false", s)
		}
	}
}

func TestCheckTransition(t *testing.T) {
	tests := []struct {
		from, to store.SandboxState
		want     error
	}{
		{store.StateCreating, store.StateRunning, nil},
		{store.StateRunning, store.StateRunning, nil}, // not a transition: other fields change
		{store.StateStopped, store.StateStopped, nil},
		{store.StateRunning, store.StateCreating, errdefs.ErrConflict},
		{store.StateStopped, store.StateRunning, errdefs.ErrConflict},
		{store.StateRunning, "bogus", errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(string(tt.from)+"_"+string(tt.to), func(t *testing.T) {
			err := store.CheckTransition(tt.from, tt.to)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("CheckTransition(%q, %q) = %v; want %v", tt.from, tt.to, err, tt.want)
			}
			if tt.want == errdefs.ErrConflict {
				for _, s := range []store.SandboxState{tt.from, tt.to} {
					if !strings.Contains(err.Error(), string(s)) {
						t.Errorf("error %q does not name state %q", err, s)
					}
				}
			}
		})
	}
}

func TestCursorRoundTrip(t *testing.T) {
	in := store.Cursor{CreatedAt: time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.FixedZone("x", 3600)), ID: "sb_a:b"}
	got, err := store.ParseCursor(in.Encode())
	if err != nil {
		t.Fatalf("ParseCursor: %v", err)
	}
	want := store.Cursor{CreatedAt: store.NormalizeTime(in.CreatedAt), ID: in.ID}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cursor round trip (-want +got):\n%s", diff)
	}
	if got.CreatedAt.Location() != time.UTC {
		t.Errorf("cursor time location = %v; want UTC", got.CreatedAt.Location())
	}
	for _, bad := range []string{"x", "!!!", store.Cursor{}.Encode()[:3], "YzI6MTox"} {
		if _, err := store.ParseCursor(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParseCursor(%q) = %v; want ErrInvalidArgument", bad, err)
		}
	}
}

func TestNormalizeLimit(t *testing.T) {
	tests := []struct {
		in, want int
		err      error
	}{
		{0, store.DefaultListLimit, nil},
		{1, 1, nil},
		{store.MaxListLimit, store.MaxListLimit, nil},
		{store.MaxListLimit + 1, store.MaxListLimit, nil},
		{-1, 0, errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		got, err := store.NormalizeLimit(tt.in)
		if got != tt.want || !errors.Is(err, tt.err) || (tt.err == nil && err != nil) {
			t.Errorf("NormalizeLimit(%d) = %d, %v; want %d, %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestNewID(t *testing.T) {
	a, b := store.NewID("sb"), store.NewID("sb")
	if a == b {
		t.Fatalf("NewID returned %q twice", a)
	}
	if !strings.HasPrefix(a, "sb_") || len(a) != len("sb_")+26 || strings.ToLower(a) != a {
		t.Errorf("NewID(%q) = %q; want sb_ + 26 lowercase characters", "sb", a)
	}
}
