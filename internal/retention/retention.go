// Package retention decides which snapshots of a session Airlock's time machine keeps.
//
// The time machine takes a rolling snapshot of each session every minute. Keeping all of them
// forever is neither useful nor affordable, so a Policy thins them out by age: every snapshot of
// the last hour, then one per hour for the last day, then one per day for the last week. Select
// applies a Policy to one session's snapshots and reports which to delete; it is a pure function
// of its arguments (no clock, no I/O), so the caller owns when it runs and how deletions happen.
package retention

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Default durations of a Policy, used for any field left zero.
const (
	DefaultKeepAll    = time.Hour
	DefaultKeepHourly = 24 * time.Hour
	DefaultKeepDaily  = 7 * 24 * time.Hour
)

// MaxKeepDaily is the longest KeepDaily that Validate accepts.
const MaxKeepDaily = 400 * 24 * time.Hour

// Policy says which snapshots of a session to keep, by age (see Select for the exact rules).
//
// The zero value is valid and means Default: each zero field takes its default (WithDefaults).
// A Policy is a plain value, safe to copy and to share between goroutines.
type Policy struct {
	// KeepAll: every snapshot younger than this is kept. Zero means DefaultKeepAll (1h).
	KeepAll time.Duration
	// KeepHourly: past KeepAll, the newest snapshot of each UTC clock hour is kept for snapshots
	// younger than this. Zero means DefaultKeepHourly (24h).
	KeepHourly time.Duration
	// KeepDaily: past KeepHourly, the newest snapshot of each UTC day is kept for snapshots
	// younger than this; older snapshots are deleted. Zero means DefaultKeepDaily (7 days).
	// It bounds how far back a session can be restored; Validate caps it at MaxKeepDaily.
	KeepDaily time.Duration
}

// Default returns the default policy: everything for 1h, hourly for 24h, daily for 7 days.
func Default() Policy {
	return Policy{KeepAll: DefaultKeepAll, KeepHourly: DefaultKeepHourly, KeepDaily: DefaultKeepDaily}
}

// WithDefaults returns p with each zero field replaced by its default. Non-zero fields, negative
// ones included, are returned unchanged (Validate rejects negative ones).
func (p Policy) WithDefaults() Policy {
	d := Default()
	if p.KeepAll == 0 {
		p.KeepAll = d.KeepAll
	}
	if p.KeepHourly == 0 {
		p.KeepHourly = d.KeepHourly
	}
	if p.KeepDaily == 0 {
		p.KeepDaily = d.KeepDaily
	}
	return p
}

// Validate reports whether p, after WithDefaults, is usable: no duration negative,
// KeepAll <= KeepHourly <= KeepDaily, and KeepDaily <= MaxKeepDaily.
// The error it returns wraps errdefs.ErrInvalidArgument.
func (p Policy) Validate() error {
	p = p.WithDefaults()
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"keep_all", p.KeepAll}, {"keep_hourly", p.KeepHourly}, {"keep_daily", p.KeepDaily}} {
		if f.d < 0 {
			return fmt.Errorf("retention policy: %s %v is negative: %w", f.name, f.d, errdefs.ErrInvalidArgument)
		}
	}
	if p.KeepAll > p.KeepHourly {
		return fmt.Errorf("retention policy: keep_all %v exceeds keep_hourly %v: %w",
			p.KeepAll, p.KeepHourly, errdefs.ErrInvalidArgument)
	}
	if p.KeepHourly > p.KeepDaily {
		return fmt.Errorf("retention policy: keep_hourly %v exceeds keep_daily %v: %w",
			p.KeepHourly, p.KeepDaily, errdefs.ErrInvalidArgument)
	}
	if p.KeepDaily > MaxKeepDaily {
		return fmt.Errorf("retention policy: keep_daily %v exceeds the maximum %v: %w",
			p.KeepDaily, MaxKeepDaily, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Merge returns base overridden field by field by over: each non-zero field of over replaces
// base's, each zero field of over keeps base's. Use it to lay a session's policy over its
// tenant's. The result is not validated and may still have zero fields (see WithDefaults).
func Merge(base, over Policy) Policy {
	if over.KeepAll != 0 {
		base.KeepAll = over.KeepAll
	}
	if over.KeepHourly != 0 {
		base.KeepHourly = over.KeepHourly
	}
	if over.KeepDaily != 0 {
		base.KeepDaily = over.KeepDaily
	}
	return base
}

// Snapshot is what Select needs to know about one snapshot of a session.
type Snapshot struct {
	// ID identifies the snapshot; IDs are expected to be unique within a session.
	ID string
	// CreatedAt is when the snapshot was taken. Only its wall-clock reading is used.
	CreatedAt time.Time
	// Protected marks a snapshot that must survive whatever its age: pinned by a user, the
	// session's head, the source of a fork. Select never removes it.
	Protected bool
}

// Select returns the IDs of the snapshots to delete under policy p, given all snapshots of one
// session (in any order) and the current time. The rules, applied to each snapshot s with
// p taken through WithDefaults:
//
//   - age = now - s.CreatedAt, on wall-clock readings (monotonic readings are ignored).
//   - A protected snapshot is kept, whatever its age.
//   - age < KeepAll: kept. This includes future-dated snapshots (age < 0).
//   - KeepAll <= age < KeepHourly: kept if s is the newest unprotected snapshot of its hour bucket,
//     else removed.
//   - KeepHourly <= age < KeepDaily: kept if s is the newest unprotected snapshot of its day bucket,
//     else removed.
//   - KeepDaily <= age: removed.
//
// The hour bucket of s is s.CreatedAt truncated to the UTC clock hour; its day bucket is
// s.CreatedAt truncated to the UTC day (00:00 UTC), whatever the time's Location. A bucket's
// newest unprotected snapshot is the one with the greatest CreatedAt, ties broken by the greatest
// ID, among ALL unprotected snapshots of the session in that bucket, of any age. So when the
// newest is younger than KeepAll (kept by that rule), the bucket's snapshots of age >= KeepAll go.
//
// Protected snapshots never count as a bucket's newest: a bucket whose newest snapshot is
// protected still keeps its newest unprotected one. That can cost one extra snapshot per bucket,
// but protection is held outside these rules (a pin can be dropped, a head moves on), and when it
// ends the bucket must not be left without the representative the policy promised.
//
// Select does not validate p; with an invalid policy it applies the rules above literally, in the
// order written. The result is sorted by (CreatedAt, ID) ascending and is nil when nothing is to be
// removed. Select does not modify snaps.
func Select(snaps []Snapshot, now time.Time, p Policy) (remove []string) {
	remove, _ = partition(snaps, now, p)
	return remove
}

// Kept returns the IDs of the snapshots Select would not remove: the complement of Select's
// result within snaps, protected snapshots included, sorted the same way and nil when empty.
func Kept(snaps []Snapshot, now time.Time, p Policy) []string {
	_, kept := partition(snaps, now, p)
	return kept
}

// partition splits snaps into removed and kept IDs, each sorted by (CreatedAt, ID).
func partition(snaps []Snapshot, now time.Time, p Policy) (remove, kept []string) {
	if len(snaps) == 0 {
		return nil, nil
	}
	p = p.WithDefaults()
	now = now.Round(0) // wall clock only, like the CreatedAt values below

	sorted := make([]Snapshot, len(snaps))
	for i, s := range snaps {
		s.CreatedAt = s.CreatedAt.Round(0)
		sorted[i] = s
	}
	slices.SortStableFunc(sorted, compare)

	// The newest unprotected snapshot of each hour and day bucket, keyed by the bucket's start.
	// sorted is ascending, so the last one written to a bucket is its newest.
	newestHour := make(map[int64]Snapshot)
	newestDay := make(map[int64]Snapshot)
	for _, s := range sorted {
		if !s.Protected {
			newestHour[hourBucket(s.CreatedAt)] = s
			newestDay[dayBucket(s.CreatedAt)] = s
		}
	}

	for _, s := range sorted {
		if keep(s, now, p, newestHour, newestDay) {
			kept = append(kept, s.ID)
		} else {
			remove = append(remove, s.ID)
		}
	}
	return remove, kept
}

// keep reports whether s survives under p (already through WithDefaults), given the newest
// unprotected snapshot of each bucket. s.CreatedAt and now carry no monotonic reading.
func keep(s Snapshot, now time.Time, p Policy, newestHour, newestDay map[int64]Snapshot) bool {
	age := now.Sub(s.CreatedAt)
	switch {
	case s.Protected, age < p.KeepAll:
		return true
	case age < p.KeepHourly:
		return compare(s, newestHour[hourBucket(s.CreatedAt)]) == 0
	case age < p.KeepDaily:
		return compare(s, newestDay[dayBucket(s.CreatedAt)]) == 0
	default:
		return false
	}
}

// compare orders snapshots by CreatedAt, then ID; the greater is the newer.
func compare(a, b Snapshot) int {
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// hourBucket reports the start of t's UTC clock hour, in Unix seconds.
func hourBucket(t time.Time) int64 { return t.Truncate(time.Hour).Unix() }

// dayBucket reports the start (00:00 UTC) of t's UTC day, in Unix seconds.
// Truncate works on absolute time from the zero Time, which is midnight UTC, and every UTC
// day is exactly 24h long, so truncating to 24h lands on 00:00 UTC.
func dayBucket(t time.Time) int64 { return t.Truncate(24 * time.Hour).Unix() }
