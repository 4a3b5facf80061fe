package node

import (
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/runtime"
)

func TestCPUCount(t *testing.T) {
	for millis, want := range map[int64]int{0: 1, -5: 1, 1: 1, 500: 1, 1000: 1, 1001: 2, 2000: 2, 2500: 3} {
		if got := CPUCount(millis); got != want {
			t.Errorf("CPUCount(%d) = %d; want %d", millis, got, want)
		}
	}
}

func TestCPUPct(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		name       string
		wall, used time.Duration
		cpus       int
		want       float64
	}{
		{"idle", 5 * time.Second, 0, 1, 0},
		{"half of one core", 5 * time.Second, 2500 * time.Millisecond, 1, 50},
		{"one of two cores", 5 * time.Second, 5 * time.Second, 2, 50},
		{"all of two cores", 5 * time.Second, 10 * time.Second, 2, 100},
		{"past the quota", 5 * time.Second, 7 * time.Second, 1, 100},
		{"a counter that went back", 5 * time.Second, -time.Second, 1, 0},
		{"rounded", 3 * time.Second, time.Second, 1, 33.33},
		{"no time passed", 0, time.Second, 1, 0},
		{"the clock went back", -time.Second, time.Second, 1, 0},
	} {
		if got := cpuPct(t0, t0.Add(c.wall), time.Minute, time.Minute+c.used, c.cpus); got != c.want {
			t.Errorf("%s: cpuPct over %v using %v of %d CPUs = %v; want %v", c.name, c.wall, c.used, c.cpus, got, c.want)
		}
	}
}

// TestRing: a ring keeps the last SampleKeep samples, oldest first, each with its CPU use since the
// one before; bounds are inclusive; a reading on demand less than minCPUWindow after the latest
// reaches back to the one before.
func TestRing(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	r := &ring{cpus: 2, last: cpuReading{t0, 0}, hasLast: true}
	n := SampleKeep + 81 // odd: the last interval is busy
	for i := 1; i <= n; i++ {
		// A core busy in every other interval: 50% and 0% by turns.
		used := time.Duration((i+1)/2) * 5 * time.Second
		r.add(t0.Add(time.Duration(i)*5*time.Second), runtime.Stats{CPUTime: used, MemoryUsed: int64(i)})
	}
	all := r.between(time.Time{}, time.Time{})
	if len(all) != SampleKeep {
		t.Fatalf("the ring holds %d samples; want %d", len(all), SampleKeep)
	}
	for i, s := range all {
		k := n - SampleKeep + 1 + i
		if s.MemUsed != int64(k) || !s.Time.Equal(t0.Add(time.Duration(k)*5*time.Second)) {
			t.Fatalf("sample %d is reading %d at %v; want reading %d", i, s.MemUsed, s.Time, k)
		}
		want := 0.0
		if k%2 == 1 {
			want = 50
		}
		if s.CPUUsedPct != want || s.CPUCount != 2 {
			t.Errorf("reading %d: %v%% of %d CPUs; want %v%% of 2", k, s.CPUUsedPct, s.CPUCount, want)
		}
	}
	lo, hi := t0.Add(100*5*time.Second), t0.Add(110*5*time.Second)
	if got := r.between(lo, hi); len(got) != 11 || !got[0].Time.Equal(lo) || !got[10].Time.Equal(hi) {
		t.Errorf("between [100, 110]: %d samples from %v; want 11, both bounds in", len(got), got)
	}
	if got := r.between(hi.Add(time.Hour*24), time.Time{}); len(got) != 0 {
		t.Errorf("between a day later and now: %d samples; want none", len(got))
	}
	// Reading n (odd) was busy; a reading on demand 200 ms later reaches back to reading n-1.
	last := t0.Add(time.Duration(n) * 5 * time.Second)
	lastUsed := time.Duration((n+1)/2) * 5 * time.Second
	live := r.sample(last.Add(200*time.Millisecond), runtime.Stats{CPUTime: lastUsed}, true)
	if want := cpuPct(last.Add(-5*time.Second), last.Add(200*time.Millisecond), lastUsed-5*time.Second, lastUsed, 2); live.CPUUsedPct != want || want == 0 {
		t.Errorf("a reading 200 ms after the latest: %v%%; want %v%% (over the interval before too)", live.CPUUsedPct, want)
	}
	if live := r.sample(last.Add(2*time.Second), runtime.Stats{CPUTime: lastUsed}, true); live.CPUUsedPct != 0 {
		t.Errorf("a reading 2 s after the latest, idle since: %v%%; want 0", live.CPUUsedPct)
	}
	// Without a first reading there is no interval yet.
	if s := (&ring{cpus: 1}).add(t0, runtime.Stats{CPUTime: time.Hour}); s.CPUUsedPct != 0 {
		t.Errorf("the first sample without a start: %v%%; want 0", s.CPUUsedPct)
	}
}
