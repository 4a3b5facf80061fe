package retention

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
)

const (
	day  = 24 * time.Hour
	week = 7 * day
)

func TestDefault(t *testing.T) {
	want := Policy{KeepAll: time.Hour, KeepHourly: 24 * time.Hour, KeepDaily: 7 * 24 * time.Hour}
	if got := Default(); got != want {
		t.Errorf("Default() = %+v; want %+v", got, want)
	}
	if err := Default().Validate(); err != nil {
		t.Errorf("Default().Validate() = %v; want nil", err)
	}
}

func TestWithDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   Policy
		want Policy
	}{
		{"zero", Policy{}, Default()},
		{"all set", Policy{time.Minute, time.Hour, day}, Policy{time.Minute, time.Hour, day}},
		{"only keep-all", Policy{KeepAll: 2 * time.Hour}, Policy{2 * time.Hour, 24 * time.Hour, week}},
		{"only keep-hourly", Policy{KeepHourly: 2 * day}, Policy{time.Hour, 2 * day, week}},
		{"only keep-daily", Policy{KeepDaily: 30 * day}, Policy{time.Hour, 24 * time.Hour, 30 * day}},
		{"negative kept", Policy{KeepAll: -time.Second}, Policy{-time.Second, 24 * time.Hour, week}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.WithDefaults(); got != tt.want {
				t.Errorf("%+v.WithDefaults() = %+v; want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		p       Policy
		wantErr bool
	}{
		{"zero", Policy{}, false},
		{"default", Default(), false},
		{"all equal", Policy{2 * time.Hour, 2 * time.Hour, 2 * time.Hour}, false},
		{"keep-daily at max", Policy{KeepDaily: MaxKeepDaily}, false},
		{"keep-daily 400 days", Policy{KeepDaily: 400 * day}, false},
		{"keep-daily over max", Policy{KeepDaily: 400*day + time.Nanosecond}, true},
		{"keep-daily a year and a half", Policy{KeepDaily: 548 * day}, true},
		{"negative keep-all", Policy{KeepAll: -time.Nanosecond}, true},
		{"negative keep-hourly", Policy{KeepAll: -2 * time.Hour, KeepHourly: -time.Hour}, true},
		{"negative keep-daily", Policy{-3 * time.Hour, -2 * time.Hour, -time.Hour}, true},
		{"keep-all over keep-hourly", Policy{KeepAll: 2 * time.Hour, KeepHourly: time.Hour}, true},
		{"keep-all over default keep-hourly", Policy{KeepAll: 25 * time.Hour}, true},
		{"keep-hourly over keep-daily", Policy{KeepHourly: 8 * day, KeepDaily: 7 * day}, true},
		{"keep-hourly over default keep-daily", Policy{KeepHourly: 8 * day}, true},
		{"keep-daily under default keep-hourly", Policy{KeepDaily: 12 * time.Hour}, true},
		{"keep-all over default keep-daily", Policy{KeepAll: 8 * day, KeepHourly: 8 * day}, true},
		{"small custom", Policy{time.Minute, 10 * time.Minute, time.Hour}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("%+v.Validate() = %v; want error: %v", tt.p, err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%+v.Validate() = %v; want an error wrapping ErrInvalidArgument", tt.p, err)
			}
		})
	}
}

func TestMerge(t *testing.T) {
	tenant := Policy{KeepAll: 2 * time.Hour, KeepHourly: 2 * day, KeepDaily: 30 * day}
	tests := []struct {
		name       string
		base, over Policy
		want       Policy
	}{
		{"both zero", Policy{}, Policy{}, Policy{}},
		{"zero over keeps base", tenant, Policy{}, tenant},
		{"zero base takes over", Policy{}, tenant, tenant},
		{"full over replaces", tenant, Default(), Default()},
		{"keep-all only", tenant, Policy{KeepAll: time.Minute}, Policy{time.Minute, 2 * day, 30 * day}},
		{"keep-hourly only", tenant, Policy{KeepHourly: 3 * day}, Policy{2 * time.Hour, 3 * day, 30 * day}},
		{"keep-daily only", tenant, Policy{KeepDaily: 90 * day}, Policy{2 * time.Hour, 2 * day, 90 * day}},
		{"partial base, partial over", Policy{KeepAll: time.Minute}, Policy{KeepDaily: day}, Policy{KeepAll: time.Minute, KeepDaily: day}},
		{"negative over overrides", tenant, Policy{KeepAll: -time.Hour}, Policy{-time.Hour, 2 * day, 30 * day}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Merge(tt.base, tt.over); got != tt.want {
				t.Errorf("Merge(%+v, %+v) = %+v; want %+v", tt.base, tt.over, got, tt.want)
			}
		})
	}
}

// minuteSnaps returns one snapshot per minute from start, n of them, with IDs in time order.
func minuteSnaps(start time.Time, n int) []Snapshot {
	snaps := make([]Snapshot, n)
	for i := range snaps {
		snaps[i] = Snapshot{ID: fmt.Sprintf("m%05d", i), CreatedAt: start.Add(time.Duration(i) * time.Minute)}
	}
	return snaps
}

// TestSelectWeek runs a week of minute snapshots through the default policy. The expectation
// is computed without buckets: with a snapshot every minute up to now, the newest snapshot of an
// hour is the one at minute 59, and the newest of a day is the one at 23:59 UTC.
func TestSelectWeek(t *testing.T) {
	starts := []time.Time{
		time.Date(2024, 3, 4, 0, 0, 0, 0, time.UTC),    // aligned on a day
		time.Date(2024, 3, 4, 0, 17, 0, 0, time.UTC),   // mid-hour
		time.Date(2024, 3, 4, 5, 43, 30, 0, time.UTC),  // mid-day, mid-minute
		time.Date(2024, 12, 28, 22, 5, 0, 0, time.UTC), // across a year end
		time.Date(2024, 2, 25, 23, 59, 0, 0, time.FixedZone("UTC+5:30", 5*3600+1800)),
	}
	const n = (7*24 + 1) * 60 // 7 days and 1 hour of minutes
	for _, p := range []Policy{{}, Default()} {
		for _, start := range starts {
			t.Run(fmt.Sprintf("%+v/%s", p, start.Format(time.RFC3339)), func(t *testing.T) {
				snaps := minuteSnaps(start, n)
				now := snaps[n-1].CreatedAt

				var wantKept, wantRemove []string
				var all, hourly, daily int
				for _, s := range snaps {
					age, u := now.Sub(s.CreatedAt), s.CreatedAt.UTC()
					switch {
					case age < time.Hour:
						all++
						wantKept = append(wantKept, s.ID)
					case age < 24*time.Hour && u.Minute() == 59:
						hourly++
						wantKept = append(wantKept, s.ID)
					case age >= 24*time.Hour && age < week && u.Hour() == 23 && u.Minute() == 59:
						daily++
						wantKept = append(wantKept, s.ID)
					default:
						wantRemove = append(wantRemove, s.ID)
					}
				}
				// 60 minutes kept whole; [1h,24h) is 23 whole hours of minutes, so holds 23 minute-59s;
				// [24h,7d) is 6 whole days of minutes, so holds 6 23:59s.
				if all != 60 || hourly != 23 || daily != 6 {
					t.Fatalf("expectation counts: all=%d hourly=%d daily=%d; want 60, 23, 6", all, hourly, daily)
				}

				gotRemove := Select(snaps, now, p)
				gotKept := Kept(snaps, now, p)
				if len(gotKept) != 89 || len(gotRemove) != n-89 {
					t.Errorf("kept %d, removed %d; want 89, %d", len(gotKept), len(gotRemove), n-89)
				}
				if diff := cmp.Diff(wantKept, gotKept); diff != "" {
					t.Errorf("Kept mismatch (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(wantRemove, gotRemove); diff != "" {
					t.Errorf("Select mismatch (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestSelectUnsortedInput(t *testing.T) {
	start := time.Date(2024, 3, 4, 0, 17, 0, 0, time.UTC)
	snaps := minuteSnaps(start, (7*24+3)*60)
	now := snaps[len(snaps)-1].CreatedAt
	for i := range snaps {
		snaps[i].Protected = i%97 == 0
	}
	wantRemove, wantKept := Select(snaps, now, Policy{}), Kept(snaps, now, Policy{})

	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5 {
		shuffled := slices.Clone(snaps)
		r.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		before := slices.Clone(shuffled)
		if diff := cmp.Diff(wantRemove, Select(shuffled, now, Policy{})); diff != "" {
			t.Errorf("shuffle %d: Select mismatch (-sorted input +shuffled input):\n%s", i, diff)
		}
		if diff := cmp.Diff(wantKept, Kept(shuffled, now, Policy{})); diff != "" {
			t.Errorf("shuffle %d: Kept mismatch (-sorted input +shuffled input):\n%s", i, diff)
		}
		if !slices.Equal(before, shuffled) {
			t.Errorf("shuffle %d: Select modified its input", i)
		}
	}
}

// snap is a test snapshot: id, CreatedAt = now - age, protected.
type snap struct {
	id   string
	age  time.Duration
	prot bool
}

func TestSelect(t *testing.T) {
	now := time.Date(2024, 5, 15, 12, 30, 0, 0, time.UTC)
	at := func(id string, tm time.Time) snap { return snap{id: id, age: now.Sub(tm)} }
	protectedAt := func(id string, tm time.Time) snap { return snap{id: id, age: now.Sub(tm), prot: true} }
	utc := func(d, h, m int) time.Time { return time.Date(2024, 5, d, h, m, 0, 0, time.UTC) }
	plus10 := time.FixedZone("UTC+10", 10*3600)
	plus530 := time.FixedZone("UTC+5:30", 5*3600+1800)
	minus7 := time.FixedZone("UTC-7", -7*3600)

	tests := []struct {
		name   string
		p      Policy
		snaps  []snap
		locs   map[string]*time.Location // CreatedAt shown in this zone (same instant)
		remove []string
	}{
		{name: "empty"},
		{
			name:  "everything young",
			snaps: []snap{{"a", 0, false}, {"b", time.Minute, false}, {"c", 59 * time.Minute, false}},
		},
		{
			name:  "future-dated kept",
			snaps: []snap{{"f", -time.Hour, false}, {"g", -30 * day, false}},
		},
		{
			name:   "future-dated newest of its hour drops older bucket-mates",
			p:      Policy{KeepAll: 10 * time.Minute},
			snaps:  []snap{at("old", utc(15, 12, 5)), at("future", utc(15, 12, 45))},
			remove: []string{"old"},
		},
		{
			name: "keep-all boundary",
			snaps: []snap{
				{"at", time.Hour, false},                           // 11:30:00, hourly rule, not newest of hour 11
				{"just-under", time.Hour - time.Nanosecond, false}, // 11:30:00+1ns, kept whole
			},
			remove: []string{"at"},
		},
		{
			name:   "keep-all boundary, newest of its hour",
			snaps:  []snap{{"at", time.Hour, false}, {"older", time.Hour + time.Minute, false}},
			remove: []string{"older"},
		},
		{
			name: "hour bucket newest younger than keep-all",
			snaps: []snap{
				at("11:05", utc(15, 11, 5)), at("11:29", utc(15, 11, 29)), // age >= 1h
				at("11:31", utc(15, 11, 31)), at("11:59", utc(15, 11, 59)), // age < 1h
			},
			remove: []string{"11:05", "11:29"},
		},
		{
			name: "keep-hourly boundary",
			snaps: []snap{
				{"at", 24 * time.Hour, false},                         // 14th 12:30:00, daily rule, not newest of the 14th
				{"just-under", 24*time.Hour - time.Nanosecond, false}, // hourly rule, newest of 14th 12:00
				at("14th-13:00", utc(14, 13, 0)),
			},
			remove: []string{"at"},
		},
		{
			name:  "keep-hourly boundary, newest of its day",
			snaps: []snap{at("13th-23:59", utc(13, 23, 59)), {"at", 24 * time.Hour, false}},
		},
		{
			name:   "keep-daily boundary",
			snaps:  []snap{{"at", week, false}, {"over", week + time.Hour, false}},
			remove: []string{"over", "at"},
		},
		{
			name:  "keep-daily boundary, just under",
			snaps: []snap{{"just-under", week - time.Nanosecond, false}},
		},
		{
			name: "newest of each hour",
			snaps: []snap{
				at("10:00", utc(15, 10, 0)), at("10:15", utc(15, 10, 15)),
				{"10:59:59", now.Sub(utc(15, 10, 59).Add(59 * time.Second)), false},
				at("09:00", utc(15, 9, 0)), at("08:30", utc(15, 8, 30)), at("08:45", utc(15, 8, 45)),
			},
			remove: []string{"08:30", "10:00", "10:15"},
		},
		{
			name: "newest of each day",
			snaps: []snap{
				at("12th-01:00", utc(12, 1, 0)), at("12th-13:00", utc(12, 13, 0)), at("12th-23:00", utc(12, 23, 0)),
				at("13th-00:00", utc(13, 0, 0)),
				at("11th-09:00", utc(11, 9, 0)), at("11th-10:00", utc(11, 10, 0)),
			},
			remove: []string{"11th-09:00", "12th-01:00", "12th-13:00"},
		},
		{
			name: "day bucket spans the hourly and daily regions",
			snaps: []snap{
				at("14th-08:00", utc(14, 8, 0)), at("14th-12:00", utc(14, 12, 0)), // age > 24h
				at("14th-13:10", utc(14, 13, 10)), at("14th-13:20", utc(14, 13, 20)), // age < 24h
			},
			remove: []string{"14th-08:00", "14th-12:00", "14th-13:10"},
		},
		{
			name: "ties in CreatedAt broken by greatest ID",
			snaps: []snap{
				at("b", utc(15, 10, 20)), at("a", utc(15, 10, 20)), at("c", utc(15, 10, 5)),
				at("y", utc(12, 8, 0)), at("z", utc(12, 8, 0)), at("x", utc(12, 8, 0)),
			},
			remove: []string{"x", "y", "c", "a"},
		},
		{
			name:   "ties past keep-daily sorted by ID",
			snaps:  []snap{{"c", 8 * day, false}, {"a", 8 * day, false}, {"b", 8 * day, false}, {"d", 9 * day, false}},
			remove: []string{"d", "a", "b", "c"},
		},
		{
			name: "protected newest of hour does not count",
			snaps: []snap{
				at("10:10", utc(15, 10, 10)), at("10:20", utc(15, 10, 20)), protectedAt("p-10:50", utc(15, 10, 50)),
			},
			remove: []string{"10:10"},
		},
		{
			name: "protected interleaved in a day",
			snaps: []snap{
				at("u-08", utc(12, 8, 0)), protectedAt("p-09", utc(12, 9, 0)), at("u-10", utc(12, 10, 0)),
				protectedAt("p-23", utc(12, 23, 0)), protectedAt("p-01", utc(12, 1, 0)),
			},
			remove: []string{"u-08"},
		},
		{
			name:  "only protected in a bucket",
			snaps: []snap{protectedAt("p1", utc(15, 9, 0)), protectedAt("p2", utc(15, 9, 30))},
		},
		{
			name: "protected older than keep-daily kept",
			snaps: []snap{
				protectedAt("p-30d", now.Add(-30*day)), {"u-30d", 30 * day, false},
				protectedAt("p-7d", now.Add(-week)), {"u-8d", 8 * day, false},
			},
			remove: []string{"u-30d", "u-8d"},
		},
		{
			name:  "protected young kept",
			snaps: []snap{protectedAt("p", now), protectedAt("future", now.Add(time.Hour))},
		},
		{
			name: "day buckets are UTC days",
			snaps: []snap{
				at("11th-23:00", utc(11, 23, 0)), // 12th 09:00 in UTC+10
				at("12th-01:00", utc(12, 1, 0)),  // 12th 11:00 in UTC+10, same local day as above
				at("12th-13:00", utc(12, 13, 0)), // 12th 23:00 in UTC+10
				at("12th-15:00", utc(12, 15, 0)), // 13th 01:00 in UTC+10, same UTC day as above
			},
			locs: map[string]*time.Location{
				"11th-23:00": plus10, "12th-01:00": plus10, "12th-13:00": plus10, "12th-15:00": plus10,
			},
			remove: []string{"12th-01:00", "12th-13:00"},
		},
		{
			name: "day buckets are UTC days, west of UTC",
			snaps: []snap{
				at("12th-03:00", utc(12, 3, 0)), // 11th 20:00 in UTC-7
				at("12th-05:00", utc(12, 5, 0)), // 11th 22:00 in UTC-7
				at("11th-20:00", utc(11, 20, 0)),
			},
			locs:   map[string]*time.Location{"12th-03:00": minus7, "12th-05:00": minus7},
			remove: []string{"12th-03:00"},
		},
		{
			name: "hour buckets are UTC hours",
			snaps: []snap{
				at("08:50", utc(15, 8, 50)),  // 14:20 in UTC+5:30
				at("09:10", utc(15, 9, 10)),  // 14:40 in UTC+5:30, same local hour, other UTC hour
				at("10:10", utc(15, 10, 10)), // 15:40 in UTC+5:30
				at("10:50", utc(15, 10, 50)), // 16:20 in UTC+5:30, other local hour, same UTC hour
			},
			locs: map[string]*time.Location{
				"08:50": plus530, "09:10": plus530, "10:10": plus530, "10:50": plus530,
			},
			remove: []string{"10:10"},
		},
		{
			name: "all thresholds equal",
			p:    Policy{KeepAll: 2 * time.Hour, KeepHourly: 2 * time.Hour, KeepDaily: 2 * time.Hour},
			snaps: []snap{
				{"0", 0, false}, {"1h", time.Hour, false}, {"2h-1ns", 2*time.Hour - time.Nanosecond, false},
				{"2h", 2 * time.Hour, false}, {"3h", 3 * time.Hour, false}, {"2d", 2 * day, false},
				{"p-3h", 3 * time.Hour, true},
			},
			remove: []string{"2d", "3h", "2h"},
		},
		{
			name: "custom policy",
			p:    Policy{KeepAll: 10 * time.Minute, KeepHourly: 3 * time.Hour, KeepDaily: 2 * day},
			snaps: []snap{
				at("12:25", utc(15, 12, 25)),                               // kept whole
				at("12:05", utc(15, 12, 5)),                                // hour 12's newest is 12:25
				at("11:10", utc(15, 11, 10)), at("11:40", utc(15, 11, 40)), // hourly
				at("09:20", utc(15, 9, 20)),                                        // past 3h: day 15's newest is 12:25
				at("09:40", utc(15, 9, 40)),                                        // under 3h: newest of hour 9
				at("14th-10:00", utc(14, 10, 0)), at("14th-22:00", utc(14, 22, 0)), // daily
				at("13th-12:00", utc(13, 12, 0)), // past 2 days
			},
			remove: []string{"13th-12:00", "14th-10:00", "09:20", "11:10", "12:05"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var snaps []Snapshot
			for _, s := range tt.snaps {
				created := now.Add(-s.age)
				if loc := tt.locs[s.id]; loc != nil {
					created = created.In(loc)
				}
				snaps = append(snaps, Snapshot{ID: s.id, CreatedAt: created, Protected: s.prot})
			}
			if err := tt.p.Validate(); err != nil {
				t.Fatalf("test policy: %v", err)
			}

			gotRemove := Select(snaps, now, tt.p)
			wantRemove := sortedIDs(snaps, tt.remove)
			if !slices.Equal(wantRemove, tt.remove) {
				t.Fatalf("test's remove list is not in (CreatedAt, ID) order: %q; want %q", tt.remove, wantRemove)
			}
			if diff := cmp.Diff(tt.remove, gotRemove); diff != "" {
				t.Errorf("Select mismatch (-want +got):\n%s", diff)
			}

			var keep []string
			for _, s := range snaps {
				if !slices.Contains(tt.remove, s.ID) {
					keep = append(keep, s.ID)
				}
			}
			if diff := cmp.Diff(sortedIDs(snaps, keep), Kept(snaps, now, tt.p)); diff != "" {
				t.Errorf("Kept mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// sortedIDs returns ids ordered by the (CreatedAt, ID) of their snapshots in snaps, nil when empty.
func sortedIDs(snaps []Snapshot, ids []string) []string {
	var sel []Snapshot
	for _, s := range snaps {
		if slices.Contains(ids, s.ID) {
			sel = append(sel, s)
		}
	}
	sort.SliceStable(sel, func(i, j int) bool {
		if !sel[i].CreatedAt.Equal(sel[j].CreatedAt) {
			return sel[i].CreatedAt.Before(sel[j].CreatedAt)
		}
		return sel[i].ID < sel[j].ID
	})
	var out []string
	for _, s := range sel {
		out = append(out, s.ID)
	}
	return out
}

// referenceSelect is a direct, quadratic reading of Select's doc comment, with buckets taken from
// the UTC calendar fields rather than by truncation.
func referenceSelect(snaps []Snapshot, now time.Time, p Policy) []string {
	p = p.WithDefaults()
	newer := func(a, b Snapshot) bool { // a is newer than b
		return a.CreatedAt.After(b.CreatedAt) || a.CreatedAt.Equal(b.CreatedAt) && a.ID > b.ID
	}
	newestIn := func(s Snapshot, same func(a, b time.Time) bool) bool {
		for _, o := range snaps {
			if !o.Protected && same(o.CreatedAt.UTC(), s.CreatedAt.UTC()) && newer(o, s) {
				return false
			}
		}
		return true
	}
	sameDay := func(a, b time.Time) bool { return a.Year() == b.Year() && a.YearDay() == b.YearDay() }
	sameHour := func(a, b time.Time) bool { return sameDay(a, b) && a.Hour() == b.Hour() }

	var remove []string
	for _, s := range snaps {
		age := now.Sub(s.CreatedAt)
		var kept bool
		switch {
		case s.Protected || age < p.KeepAll:
			kept = true
		case age < p.KeepHourly:
			kept = newestIn(s, sameHour)
		case age < p.KeepDaily:
			kept = newestIn(s, sameDay)
		}
		if !kept {
			remove = append(remove, s.ID)
		}
	}
	return sortedIDs(snaps, remove)
}

// TestSelectMatchesReference compares Select with referenceSelect on random sessions with
// coarse timestamps (so ties are common), protected snapshots and mixed time zones.
func TestSelectMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	now := time.Date(2024, 5, 15, 12, 30, 0, 0, time.UTC)
	zones := []*time.Location{time.UTC, time.FixedZone("UTC+5:30", 5*3600+1800), time.FixedZone("UTC-7", -7*3600)}
	policies := []Policy{
		{},
		{KeepAll: 10 * time.Minute, KeepHourly: 3 * time.Hour, KeepDaily: 2 * day},
		{KeepAll: 2 * time.Hour, KeepHourly: 2 * time.Hour, KeepDaily: 2 * time.Hour},
		{KeepAll: 0, KeepHourly: 5 * day, KeepDaily: 9 * day},
	}
	for i := range 2000 {
		p := policies[i%len(policies)]
		n := r.IntN(40)
		snaps := make([]Snapshot, n)
		for j, id := range r.Perm(n) {
			age := time.Duration(r.IntN(10*24*60/7)-20) * 7 * time.Minute // about -2h to 10d, ties likely
			snaps[j] = Snapshot{
				ID:        fmt.Sprintf("s%02d", id),
				CreatedAt: now.Add(-age).In(zones[r.IntN(len(zones))]),
				Protected: r.IntN(5) == 0,
			}
		}
		want := referenceSelect(snaps, now, p)
		got := Select(snaps, now, p)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("case %d, policy %+v, snaps %+v: Select mismatch (-reference +got):\n%s", i, p, snaps, diff)
		}
		kept := Kept(snaps, now, p)
		if len(kept)+len(got) != n {
			t.Fatalf("case %d: kept %d + removed %d != %d snapshots", i, len(kept), len(got), n)
		}
		for _, id := range kept {
			if slices.Contains(got, id) {
				t.Fatalf("case %d: %s both kept and removed", i, id)
			}
		}
	}
}

func TestSelectMonotonicClock(t *testing.T) {
	// Times from time.Now carry a monotonic reading; Select must treat them like wall times.
	now := time.Now()
	snaps := []Snapshot{
		{ID: "new", CreatedAt: now.Add(-time.Minute)},
		{ID: "old", CreatedAt: now.Add(-30 * day)},
	}
	if diff := cmp.Diff([]string{"old"}, Select(snaps, now, Policy{})); diff != "" {
		t.Errorf("Select mismatch (-want +got):\n%s", diff)
	}
}

func BenchmarkSelectWeek(b *testing.B) {
	snaps := minuteSnaps(time.Date(2024, 3, 4, 0, 17, 0, 0, time.UTC), (7*24+1)*60)
	now := snaps[len(snaps)-1].CreatedAt
	for b.Loop() {
		Select(snaps, now, Policy{})
	}
}
