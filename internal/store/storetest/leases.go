package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/store"
)

func testLeases(t *testing.T, s store.Store) {
	ctx := t.Context()
	const res = "session/se_lease"
	const short = 150 * time.Millisecond

	_, err := s.GetLease(ctx, res)
	wantErr(t, "GetLease of a new resource", err, errdefs.ErrNotFound)
	_, err = s.RenewLease(ctx, res, "a", 1, time.Minute)
	wantErr(t, "RenewLease of a new resource", err, errdefs.ErrNotFound)
	for _, bad := range []struct {
		res, holder string
		ttl         time.Duration
	}{{"", "a", time.Minute}, {res, "", time.Minute}, {res, "a", 0}, {res, "a", -time.Second}} {
		_, err := s.AcquireLease(ctx, bad.res, bad.holder, bad.ttl)
		wantErr(t, fmt.Sprintf("AcquireLease(%q, %q, %v)", bad.res, bad.holder, bad.ttl), err, errdefs.ErrInvalidArgument)
	}

	// A first holder gets token 1; taking it again keeps the token and moves the expiry.
	before := time.Now()
	a, err := s.AcquireLease(ctx, res, "a", short)
	wantErr(t, "AcquireLease(a)", err, nil)
	if a.Token != 1 || a.Holder != "a" || a.Resource != res || a.ExpiresAt.Before(before.Add(short-time.Millisecond)) {
		t.Fatalf("first lease %+v; want token 1, holder a, expiring about %v from now", a, short)
	}
	a2, err := s.AcquireLease(ctx, res, "a", time.Hour)
	wantErr(t, "AcquireLease(a) again", err, nil)
	if a2.Token != 1 || !a2.AcquiredAt.Equal(a.AcquiredAt) || !a2.ExpiresAt.After(a.ExpiresAt) {
		t.Errorf("re-acquired lease %+v; want token 1, the same AcquiredAt, a later expiry than %v", a2, a.ExpiresAt)
	}
	// Another holder is refused while it runs.
	_, err = s.AcquireLease(ctx, res, "b", time.Minute)
	wantErr(t, "AcquireLease(b) while a holds it", err, errdefs.ErrConflict)
	_, err = s.RenewLease(ctx, res, "b", 1, time.Minute)
	wantErr(t, "RenewLease(b)", err, errdefs.ErrConflict)
	_, err = s.RenewLease(ctx, res, "a", 2, time.Minute)
	wantErr(t, "RenewLease(a, wrong token)", err, errdefs.ErrConflict)
	wantErr(t, "ReleaseLease(b)", s.ReleaseLease(ctx, res, "b", 1), errdefs.ErrConflict)

	// Once it runs out, another holder takes it with a larger token, and the first one has lost it.
	_, err = s.RenewLease(ctx, res, "a", 1, short)
	wantErr(t, "RenewLease(a)", err, nil)
	time.Sleep(short + 50*time.Millisecond)
	_, err = s.RenewLease(ctx, res, "a", 1, time.Minute)
	wantErr(t, "RenewLease(a) after it expired", err, errdefs.ErrConflict)
	b, err := s.AcquireLease(ctx, res, "b", time.Minute)
	wantErr(t, "AcquireLease(b) after a's expired", err, nil)
	if b.Token != 2 || b.Holder != "b" {
		t.Errorf("taken-over lease %+v; want token 2, holder b", b)
	}
	_, err = s.RenewLease(ctx, res, "a", 1, time.Minute)
	wantErr(t, "RenewLease(a) after b took it", err, errdefs.ErrConflict)
	wantErr(t, "ReleaseLease(a) after b took it", s.ReleaseLease(ctx, res, "a", 1), errdefs.ErrConflict)
	if got, err := s.GetLease(ctx, res); err != nil || got.Holder != "b" || got.Token != 2 {
		t.Errorf("GetLease = %+v, %v; want b's with token 2", got, err)
	}

	// Released, it is free at once, and the next holder's token is larger still; releasing twice is fine.
	wantErr(t, "ReleaseLease(b)", s.ReleaseLease(ctx, res, "b", 2), nil)
	wantErr(t, "ReleaseLease(b) again", s.ReleaseLease(ctx, res, "b", 2), nil)
	c, err := s.AcquireLease(ctx, res, "c", time.Minute)
	wantErr(t, "AcquireLease(c) after b released", err, nil)
	if c.Token != 3 {
		t.Errorf("lease after a release %+v; want token 3", c)
	}
	// Resources are independent.
	if other, err := s.AcquireLease(ctx, "session/se_other", "b", time.Minute); err != nil || other.Token != 1 {
		t.Errorf("another resource: %+v, %v; want token 1", other, err)
	}
}

// testLeaseRace: of holders racing for one free resource, exactly one gets it; after it expires, of
// the next race exactly one again, with the next token.
func testLeaseRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	for round, wantToken := range []int64{1, 2} {
		var mu sync.Mutex
		var winners []store.Lease
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := s.AcquireLease(ctx, "session/se_race", fmt.Sprintf("holder-%d-%d", round, i), 200*time.Millisecond)
				if err == nil {
					mu.Lock()
					winners = append(winners, l)
					mu.Unlock()
				} else if !errors.Is(err, errdefs.ErrConflict) {
					t.Errorf("AcquireLease: %v; want nil or ErrConflict", err)
				}
			}()
		}
		wg.Wait()
		if len(winners) != 1 || winners[0].Token != wantToken {
			t.Fatalf("round %d: winners %+v; want one, with token %d", round, winners, wantToken)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
