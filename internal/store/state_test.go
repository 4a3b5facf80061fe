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

// TestSessionCanTransition checks every pair of session states against the state machine as the design
// writes it.
func TestSessionCanTransition(t *testing.T) {
	const (
		c  = store.SessionCreating
		r  = store.SessionRunning
		pg = store.SessionPausing
		p  = store.SessionPaused
		rs = store.SessionResuming
		f  = store.SessionFailed
		dg = store.SessionDeleting
		d  = store.SessionDeleted
	)
	allowed := map[[2]store.SessionState]bool{
		{c, r}: true, {c, f}: true, {c, dg}: true,
		{r, pg}: true, {r, rs}: true, {r, f}: true, {r, dg}: true,
		{pg, p}: true, {pg, r}: true, {pg, f}: true, {pg, dg}: true,
		{p, rs}: true, {p, dg}: true,
		{rs, r}: true, {rs, p}: true, {rs, f}: true, {rs, dg}: true,
		{f, rs}: true, {f, dg}: true,
		{dg, d}: true,
	}
	states := append(store.SessionStates(), "", "stopped", "Running")
	for _, from := range states {
		for _, to := range states {
			want := allowed[[2]store.SessionState{from, to}]
			if got := from.CanTransition(to); got != want {
				t.Errorf("%q.CanTransition(%q) = %v; want %v", from, to, got, want)
			}
			err := store.CheckSessionTransition(from, to)
			switch {
			case !to.Valid():
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("CheckSessionTransition(%q, %q) = %v; want ErrInvalidArgument", from, to, err)
				}
			case want || from == to:
				if err != nil {
					t.Errorf("CheckSessionTransition(%q, %q) = %v; want nil", from, to, err)
				}
			case !errors.Is(err, errdefs.ErrConflict):
				t.Errorf("CheckSessionTransition(%q, %q) = %v; want ErrConflict", from, to, err)
			default:
				for _, s := range []store.SessionState{from, to} {
					if !strings.Contains(err.Error(), string(s)) {
						t.Errorf("error %q does not name state %q", err, s)
					}
				}
			}
		}
	}
}

func TestSessionValidTerminalInitial(t *testing.T) {
	if got, want := len(store.SessionStates()), 8; got != want {
		t.Fatalf("SessionStates() has %d states; want %d", got, want)
	}
	for _, s := range store.SessionStates() {
		if !s.Valid() {
			t.Errorf("%q.Valid() = false; want true", s)
		}
		if got, want := s.Terminal(), s == store.SessionDeleted; got != want {
			t.Errorf("%q.Terminal() = %v; want %v", s, got, want)
		}
		want := s == store.SessionCreating || s == store.SessionPaused || s == store.SessionResuming
		if got := store.InitialSessionState(s); got != want {
			t.Errorf("InitialSessionState(%q) = %v; want %v", s, got, want)
		}
	}
	for _, s := range []store.SessionState{"", "stopped", "Paused"} {
		if s.Valid() || s.Terminal() || store.InitialSessionState(s) {
			t.Errorf("%q: Valid, Terminal or InitialSessionState reports true; want false", s)
		}
	}
}

// TestSnapshotCanTransition checks every pair of snapshot states against the state machine.
func TestSnapshotCanTransition(t *testing.T) {
	w, u, c, f := store.SnapshotWriting, store.SnapshotUploading, store.SnapshotComplete, store.SnapshotFailed
	allowed := map[[2]store.SnapshotState]bool{{w, u}: true, {w, c}: true, {w, f}: true, {u, c}: true, {u, f}: true}
	states := append(store.SnapshotStates(), "", "deleted")
	for _, from := range states {
		for _, to := range states {
			want := allowed[[2]store.SnapshotState{from, to}]
			if got := from.CanTransition(to); got != want {
				t.Errorf("%q.CanTransition(%q) = %v; want %v", from, to, got, want)
			}
			err := store.CheckSnapshotTransition(from, to)
			switch {
			case !to.Valid():
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("CheckSnapshotTransition(%q, %q) = %v; want ErrInvalidArgument", from, to, err)
				}
			case want || from == to:
				if err != nil {
					t.Errorf("CheckSnapshotTransition(%q, %q) = %v; want nil", from, to, err)
				}
			case !errors.Is(err, errdefs.ErrConflict):
				t.Errorf("CheckSnapshotTransition(%q, %q) = %v; want ErrConflict", from, to, err)
			}
		}
	}
	for _, s := range store.SnapshotStates() {
		if got, want := s.Terminal(), s != w && s != u; got != want {
			t.Errorf("%q.Terminal() = %v; want %v", s, got, want)
		}
	}
	for _, s := range states {
		if got, want := s.Usable(), s == u || s == c; got != want {
			t.Errorf("%q.Usable() = %v; want %v", s, got, want)
		}
	}
	for _, tr := range store.SnapshotTriggers() {
		if !tr.Valid() {
			t.Errorf("%q.Valid() = false; want true", tr)
		}
	}
	for _, tr := range []store.SnapshotTrigger{"", "Manual", "cron"} {
		if tr.Valid() {
			t.Errorf("%q.Valid() = true; want false", tr)
		}
	}
}

// TestCheckSnapshotUpdate checks what may change on a snapshot in each state.
func TestCheckSnapshotUpdate(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 6789, time.UTC)
	snap := func(st store.SnapshotState) store.Snapshot {
		return store.Snapshot{ID: "sn_1", State: st, Name: "n", LogicalBytes: 10, StoredBytes: 5,
			Meta: map[string]string{"k": "v"}, CompletedAt: &at}
	}
	change := map[string]func(*store.Snapshot){
		"nothing":      func(*store.Snapshot) {},
		"name":         func(s *store.Snapshot) { s.Name = "other" },
		"pinned":       func(s *store.Snapshot) { s.Pinned = true },
		"reason":       func(s *store.Snapshot) { s.Reason = "why" },
		"bytes":        func(s *store.Snapshot) { s.StoredBytes++ },
		"meta":         func(s *store.Snapshot) { s.Meta = map[string]string{"k": "w"} },
		"completed at": func(s *store.Snapshot) { s.CompletedAt = nil },
		// Precision the store drops anyway is no change.
		"completed at, same microsecond": func(s *store.Snapshot) { s.CompletedAt = ptrTo(at.Add(100).In(time.Local)) },
		"meta, nil for empty":            func(s *store.Snapshot) { s.Meta = nil },
	}
	tests := []struct {
		state  store.SnapshotState
		change string
		want   error
	}{
		{store.SnapshotWriting, "nothing", nil},
		{store.SnapshotWriting, "name", nil},
		{store.SnapshotWriting, "reason", nil},
		{store.SnapshotWriting, "bytes", nil},
		{store.SnapshotWriting, "meta", nil},
		{store.SnapshotWriting, "completed at", nil},
		{store.SnapshotUploading, "nothing", nil},
		{store.SnapshotUploading, "name", nil},
		{store.SnapshotUploading, "pinned", nil},
		{store.SnapshotUploading, "reason", nil},
		{store.SnapshotUploading, "bytes", nil},
		{store.SnapshotUploading, "meta", nil},
		{store.SnapshotUploading, "completed at", nil},
		{store.SnapshotComplete, "nothing", nil},
		{store.SnapshotComplete, "name", nil},
		{store.SnapshotComplete, "pinned", nil},
		{store.SnapshotComplete, "completed at, same microsecond", nil},
		{store.SnapshotComplete, "reason", errdefs.ErrConflict},
		{store.SnapshotComplete, "bytes", errdefs.ErrConflict},
		{store.SnapshotComplete, "meta", errdefs.ErrConflict},
		{store.SnapshotComplete, "completed at", errdefs.ErrConflict},
		{store.SnapshotFailed, "nothing", nil},
		{store.SnapshotFailed, "name", errdefs.ErrConflict},
		{store.SnapshotFailed, "pinned", errdefs.ErrConflict},
		{store.SnapshotFailed, "bytes", errdefs.ErrConflict},
	}
	for _, tt := range tests {
		t.Run(string(tt.state)+"/"+tt.change, func(t *testing.T) {
			cur := snap(tt.state)
			next := snap(tt.state)
			change[tt.change](&next)
			err := store.CheckSnapshotUpdate(cur, next)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("CheckSnapshotUpdate = %v; want %v", err, tt.want)
			}
		})
	}
	// Empty and nil Meta are the same on a stored snapshot too.
	cur := snap(store.SnapshotComplete)
	cur.Meta = nil
	next := snap(store.SnapshotComplete)
	next.Meta = map[string]string{}
	if err := store.CheckSnapshotUpdate(cur, next); err != nil {
		t.Errorf("CheckSnapshotUpdate(nil meta → empty meta) = %v; want nil", err)
	}
	// State changes go through the state machine.
	if err := store.CheckSnapshotUpdate(snap(store.SnapshotComplete), snap(store.SnapshotWriting)); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("CheckSnapshotUpdate(complete → writing) = %v; want ErrConflict", err)
	}
	if err := store.CheckSnapshotUpdate(snap(store.SnapshotWriting), snap("bogus")); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("CheckSnapshotUpdate(writing → bogus) = %v; want ErrInvalidArgument", err)
	}
}

func TestSessionAndSnapshotValidate(t *testing.T) {
	okSession := store.Session{ID: "se_1", TenantID: "tn_1", State: store.SessionRunning, RollingIntervalSeconds: 60,
		Retention: store.RetentionSpec{KeepAllSeconds: 3600, KeepHourlySeconds: 86400, KeepDailySeconds: 30 * 86400}}
	okSnapshot := store.Snapshot{ID: "sn_1", TenantID: "tn_1", SessionID: "se_1", State: store.SnapshotWriting, Trigger: store.TriggerManual}
	if err := okSession.Validate(); err != nil {
		t.Fatalf("Session.Validate(%+v) = %v; want nil", okSession, err)
	}
	if err := okSnapshot.Validate(); err != nil {
		t.Fatalf("Snapshot.Validate(%+v) = %v; want nil", okSnapshot, err)
	}
	badSessions := map[string]func(*store.Session){
		"no ID":              func(s *store.Session) { s.ID = "" },
		"no tenant":          func(s *store.Session) { s.TenantID = "" },
		"unknown state":      func(s *store.Session) { s.State = "stopped" },
		"negative cpu":       func(s *store.Session) { s.Spec.CPUMillicores = -1 },
		"negative disk":      func(s *store.Session) { s.Spec.DiskMB = -1 },
		"negative idle":      func(s *store.Session) { s.IdleTimeoutSeconds = -1 },
		"negative rolling":   func(s *store.Session) { s.RollingIntervalSeconds = -1 },
		"negative keep all":  func(s *store.Session) { s.Retention.KeepAllSeconds = -1 },
		"negative hourly":    func(s *store.Session) { s.Retention.KeepHourlySeconds = -1 },
		"negative daily":     func(s *store.Session) { s.Retention.KeepDailySeconds = -1 },
		"negative version":   func(s *store.Session) { s.Version = -1 },
		"empty metadata key": func(s *store.Session) { s.Metadata = map[string]string{"": "x"} },
	}
	for name, change := range badSessions {
		se := okSession
		change(&se)
		if err := se.Validate(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Session.Validate(%s) = %v; want ErrInvalidArgument", name, err)
		}
	}
	badSnapshots := map[string]func(*store.Snapshot){
		"no ID":            func(s *store.Snapshot) { s.ID = "" },
		"no tenant":        func(s *store.Snapshot) { s.TenantID = "" },
		"no session":       func(s *store.Snapshot) { s.SessionID = "" },
		"unknown state":    func(s *store.Snapshot) { s.State = "done" },
		"no trigger":       func(s *store.Snapshot) { s.Trigger = "" },
		"negative bytes":   func(s *store.Snapshot) { s.StoredBytes = -1 },
		"negative version": func(s *store.Snapshot) { s.Version = -1 },
		"empty meta key":   func(s *store.Snapshot) { s.Meta = map[string]string{"": "x"} },
	}
	for name, change := range badSnapshots {
		sn := okSnapshot
		change(&sn)
		if err := sn.Validate(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Snapshot.Validate(%s) = %v; want ErrInvalidArgument", name, err)
		}
	}
}

func TestRetentionSpecValidate(t *testing.T) {
	for _, tt := range []struct {
		r    store.RetentionSpec
		want error
	}{
		{store.RetentionSpec{}, nil},
		{store.RetentionSpec{KeepAllSeconds: 1}, nil},
		{store.RetentionSpec{KeepAllSeconds: 86400, KeepHourlySeconds: 3600}, nil}, // order is not judged
		{store.RetentionSpec{KeepAllSeconds: 1<<63 - 1, KeepHourlySeconds: 1<<63 - 1, KeepDailySeconds: 1<<63 - 1}, nil},
		{store.RetentionSpec{KeepAllSeconds: -1}, errdefs.ErrInvalidArgument},
		{store.RetentionSpec{KeepHourlySeconds: -1}, errdefs.ErrInvalidArgument},
		{store.RetentionSpec{KeepAllSeconds: 1, KeepDailySeconds: -1 << 63}, errdefs.ErrInvalidArgument},
	} {
		if err := tt.r.Validate(); !errors.Is(err, tt.want) {
			t.Errorf("%+v.Validate() = %v; want %v", tt.r, err, tt.want)
		}
	}
}

func TestSessionAndSnapshotFilterValidate(t *testing.T) {
	good := []error{
		store.SessionFilter{}.Validate(),
		store.SessionFilter{States: store.SessionStates(), Metadata: map[string]string{"k": ""}, Limit: 5,
			Cursor: store.Cursor{ID: "se_1"}.Encode()}.Validate(),
		store.SnapshotFilter{}.Validate(),
		store.SnapshotFilter{SessionID: "se_1", States: store.SnapshotStates(), Limit: 5,
			Cursor: store.Cursor{ID: "sn_1"}.Encode()}.Validate(),
	}
	for i, err := range good {
		if err != nil {
			t.Errorf("good filter %d: Validate = %v; want nil", i, err)
		}
	}
	bad := map[string]error{
		"session: unknown state":   store.SessionFilter{States: []store.SessionState{"stopped"}}.Validate(),
		"session: empty key":       store.SessionFilter{Metadata: map[string]string{"": "x"}}.Validate(),
		"session: negative limit":  store.SessionFilter{Limit: -1}.Validate(),
		"session: bad cursor":      store.SessionFilter{Cursor: "nope"}.Validate(),
		"snapshot: unknown state":  store.SnapshotFilter{States: []store.SnapshotState{"deleted"}}.Validate(),
		"snapshot: negative limit": store.SnapshotFilter{Limit: -1}.Validate(),
		"snapshot: bad cursor":     store.SnapshotFilter{Cursor: "nope"}.Validate(),
	}
	for name, err := range bad {
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: Validate = %v; want ErrInvalidArgument", name, err)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
