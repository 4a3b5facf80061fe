package daemon

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

func TestRing(t *testing.T) {
	tests := []struct {
		name   string
		max    int
		writes []string
		want   string // bytes held
	}{
		{"empty", 8, nil, ""},
		{"under", 8, []string{"abc", "de"}, "abcde"},
		{"exact", 8, []string{"abcd", "efgh"}, "abcdefgh"},
		{"overflow", 8, []string{"abcdef", "ghij"}, "cdefghij"},
		{"wrap twice", 4, []string{"ab", "cd", "ef", "gh", "i"}, "fghi"},
		{"huge write", 4, []string{"ab", "0123456789"}, "6789"},
		{"huge first", 4, []string{"0123456789", "x"}, "789x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ring{max: tt.max}
			total := 0
			for _, w := range tt.writes {
				r.write([]byte(w))
				total += len(w)
			}
			if r.end != int64(total) {
				t.Errorf("end = %d; want %d", r.end, total)
			}
			if got, want := r.first(), int64(total-len(tt.want)); got != want {
				t.Errorf("first = %d; want %d", got, want)
			}
			buf := make([]byte, 100)
			n := r.readAt(buf, r.first())
			if got := string(buf[:n]); got != tt.want {
				t.Errorf("held %q; want %q", got, tt.want)
			}
		})
	}
}

// TestRingModel checks ring against a plain slice under random writes and reads.
func TestRingModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 200 {
		max := 1 + rng.IntN(64)
		r := ring{max: max}
		var all []byte
		for range 50 {
			w := make([]byte, rng.IntN(2*max))
			for i := range w {
				w[i] = byte(rng.IntN(256))
			}
			r.write(w)
			all = append(all, w...)
			held := all[max0(len(all)-max):]
			if r.first() != int64(len(all)-len(held)) || r.end != int64(len(all)) {
				t.Fatalf("iter %d: first/end = %d/%d; want %d/%d", iter, r.first(), r.end, len(all)-len(held), len(all))
			}
			off := r.first() + int64(rng.IntN(len(held)+1))
			dst := make([]byte, rng.IntN(max+1))
			n := r.readAt(dst, off)
			want := all[off:min(int64(len(all)), off+int64(len(dst)))]
			if !bytes.Equal(dst[:n], want) {
				t.Fatalf("iter %d: readAt(%d) = %x; want %x", iter, off, dst[:n], want)
			}
		}
		if len(r.buf) > max {
			t.Fatalf("buffer grew to %d beyond %d", len(r.buf), max)
		}
	}
}

func max0(n int) int { return max(n, 0) }

func TestParseSignal(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"SIGTERM", 15, true},
		{"TERM", 15, true},
		{"kill", 9, true},
		{"9", 9, true},
		{"SIGWINCH", 28, true},
		{"0", 0, false},
		{"65", 0, false},
		{"NOPE", 0, false},
		{"", 0, false},
	} {
		sig, err := parseSignal(tt.in)
		if (err == nil) != tt.ok || (tt.ok && int(sig) != tt.want) {
			t.Errorf("parseSignal(%q) = %d, %v; want %d ok=%v", tt.in, sig, err, tt.want, tt.ok)
		}
	}
}

func TestBuildEnv(t *testing.T) {
	s := &server{cfg: Config{}.withDefaults()}
	id := identity{name: "user", home: "/home/user"}
	got := s.buildEnv(id, []string{"HOME=/x", "FOO=1", "FOO=2"}, true)
	want := []string{"PATH=" + DefaultPath, "HOME=/x", "USER=user", "LOGNAME=user", "TERM=xterm-256color", "FOO=2"}
	if len(got) != len(want) {
		t.Fatalf("buildEnv = %q; want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("buildEnv[%d] = %q; want %q", i, got[i], want[i])
		}
	}
}
