package cli

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseCPU(t *testing.T) {
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"", 0, true}, {"2", 2000, true}, {"0.5", 500, true}, {"500m", 500, true}, {"1.25", 1250, true},
		{"0", 0, false}, {"-1", 0, false}, {"m", 0, false}, {"abc", 0, false}, {"1e9", 0, false}, {"0m", 0, false},
	}
	for _, tt := range tests {
		got, err := parseCPU(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseCPU(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseMiB(t *testing.T) {
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"", 0, true}, {"512", 512, true}, {"512M", 512, true}, {"512MiB", 512, true}, {"512mb", 512, true},
		{"2G", 2048, true}, {"1.5g", 1536, true}, {"2GiB", 2048, true}, {"1T", 1 << 20, true},
		{"0", 0, false}, {"1.5", 0, false}, {"12X", 0, false}, {"G", 0, false}, {"-5", 0, false}, {"9999999T", 0, false},
	}
	for _, tt := range tests {
		got, err := parseMiB("memory", tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseMiB(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseSeconds(t *testing.T) {
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"", 0, true}, {"300", 300, true}, {"5m", 300, true}, {"1h30m", 5400, true}, {"1500ms", 2, true},
		{"90d", 90 * 86400, true}, {"1d", 86400, true},
		{"0", 0, false}, {"-5", 0, false}, {"-5m", 0, false}, {"soon", 0, false},
		{"0d", 0, false}, {"-2d", 0, false}, {"1.5d", 0, false}, {"d", 0, false}, {"99999999999d", 0, false},
	}
	for _, tt := range tests {
		got, err := parseSeconds("--timeout", tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseSeconds(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseKV(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_FROM_ENV", "from env")
	tests := []struct {
		name    string
		in      []string
		fromEnv bool
		want    map[string]string
		ok      bool
	}{
		{"empty", nil, false, nil, true},
		{"pairs", []string{"a=1", "b=x=y", "c="}, false, map[string]string{"a": "1", "b": "x=y", "c": ""}, true},
		{"bare key from env", []string{"AIRLOCK_TEST_FROM_ENV", "AIRLOCK_TEST_UNSET_VAR"}, true, map[string]string{"AIRLOCK_TEST_FROM_ENV": "from env"}, true},
		{"bare key not allowed", []string{"k"}, false, nil, false},
		{"empty key", []string{"=v"}, true, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseKV(tt.in, "env", tt.fromEnv)
			if (err == nil) != tt.ok {
				t.Fatalf("parseKV(%q): error %v; want ok=%v", tt.in, err, tt.ok)
			}
			if diff := cmp.Diff(tt.want, got); tt.ok && diff != "" {
				t.Errorf("parseKV(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParseCpArg(t *testing.T) {
	tests := []struct {
		in   string
		want remotePath
		ok   bool
	}{
		{"sb_x:/home/user/a", remotePath{sandbox: "sb_x", path: "/home/user/a"}, true},
		{"./a:b", remotePath{path: "./a:b"}, true},
		{"/tmp/a:b", remotePath{path: "/tmp/a:b"}, true},
		{"file.txt", remotePath{path: "file.txt"}, true},
		{"-", remotePath{path: "-"}, true},
		{":/x", remotePath{path: ":/x"}, true},
		{"sb_x:relative", remotePath{}, false},
		{"", remotePath{}, false},
	}
	for _, tt := range tests {
		got, err := parseCpArg(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseCpArg(%q) = %+v, %v; want %+v, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		code   int
		signal string
		want   int
	}{
		{0, "", 0}, {7, "", 7}, {-1, "KILL", 137}, {-1, "SIGINT", 130}, {-1, "15", 143}, {-1, "term", 143},
		{-1, "NOSUCH", 255}, {-1, "", 255}, {300, "", 255},
	}
	for _, tt := range tests {
		if got := exitCode(tt.code, tt.signal); got != tt.want {
			t.Errorf("exitCode(%d, %q) = %d; want %d", tt.code, tt.signal, got, tt.want)
		}
	}
}

func TestShellJoin(t *testing.T) {
	got := shellJoin([]string{"python3", "-c", "print('hi')", "", "a/b=c"})
	want := `python3 -c 'print('\''hi'\'')' '' a/b=c`
	if got != want {
		t.Errorf("shellJoin: got %q; want %q", got, want)
	}
}

func TestRelTime(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	tests := []struct {
		t    *time.Time
		want string
	}{
		{nil, "-"}, {&time.Time{}, "-"}, {at(-42 * time.Second), "42s ago"}, {at(5 * time.Minute), "in 5m"},
		{at(-3 * time.Hour), "3h ago"}, {at(-72 * time.Hour), "3d ago"}, {at(10*time.Minute - time.Second), "in 10m"},
		{at(59*time.Minute + 50*time.Second), "in 1h"}, {at(59*time.Second + 600*time.Millisecond), "in 1m"},
	}
	for _, tt := range tests {
		if got := relTime(tt.t, now); got != tt.want {
			t.Errorf("relTime(%v) = %q; want %q", tt.t, got, tt.want)
		}
	}
}

func TestCleanCell(t *testing.T) {
	if got, want := cleanCell("a\tb\x1b[31mc\n"), "a b [31mc "; got != want {
		t.Errorf("cleanCell: got %q; want %q", got, want)
	}
	if got := cleanCell(""); got != "-" {
		t.Errorf("cleanCell(\"\"): got %q; want -", got)
	}
}

// TestEgressAllowPrivate: the operator's guarded ranges come from the flags and the environment; a
// value that is not a CIDR is refused with a message naming the flag.
func TestEgressAllowPrivate(t *testing.T) {
	t.Setenv(EnvEgressAllowPrivate, " 10.20.0.0/16, 169.254.169.254/32 ,")
	got, err := egressAllowPrivate([]string{"192.168.1.7/24"})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24"), netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("169.254.169.254/32")}
	if !slices.Equal(got, want) {
		t.Errorf("got %v; want %v", got, want)
	}
	if _, err := egressAllowPrivate([]string{"10.0.0.1"}); err == nil || !strings.Contains(err.Error(), "--egress-allow-private") {
		t.Errorf("a bare address: %v; want an error naming the flag", err)
	}
}
