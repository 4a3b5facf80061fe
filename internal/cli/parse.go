package cli

import (
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// parseKV parses KEY=VALUE arguments of the flag named what. With fromEnv, a bare KEY takes its value
// from this process's environment (and is skipped when unset there).
func parseKV(args []string, what string, fromEnv bool) (map[string]string, error) {
	if len(args) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(args))
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if k == "" {
			return nil, fmt.Errorf("--%s %q: want KEY=VALUE", what, a)
		}
		if !ok {
			if !fromEnv {
				return nil, fmt.Errorf("--%s %q: want KEY=VALUE", what, a)
			}
			if v, ok = os.LookupEnv(k); !ok {
				continue
			}
		}
		m[k] = v
	}
	return m, nil
}

// parseCPU parses a CPU quota into millicores: "500m" is 500 millicores, "0.5" half a core, "2" two cores.
func parseCPU(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	if m, ok := strings.CutSuffix(s, "m"); ok {
		n, err := strconv.Atoi(m)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("--cpu %q: want cores (0.5, 2) or millicores (500m)", s)
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) || f > 1e6 {
		return 0, fmt.Errorf("--cpu %q: want cores (0.5, 2) or millicores (500m)", s)
	}
	return int(math.Round(f * 1000)), nil
}

// sizeRE splits a size into its number and its unit.
var sizeRE = regexp.MustCompile(`^([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)$`)

// sizeUnits are the units of a size, in MiB.
var sizeUnits = map[string]float64{
	"": 1, "m": 1, "mi": 1, "mb": 1, "mib": 1,
	"g": 1024, "gi": 1024, "gb": 1024, "gib": 1024,
	"t": 1 << 20, "ti": 1 << 20, "tb": 1 << 20, "tib": 1 << 20,
}

// parseMiB parses a size into MiB: a bare number is MiB; the units M, G and T (with or without i and B,
// any case) are powers of 1024, so "512" and "512M" are 512 and "1.5G" is 1536.
func parseMiB(flag, s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	bad := fmt.Errorf("--%s %q: want a size such as 512 (MiB), 512M or 2G", flag, s)
	m := sizeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, bad
	}
	unit, ok := sizeUnits[strings.ToLower(m[2])]
	f, err := strconv.ParseFloat(m[1], 64)
	if !ok || err != nil || f <= 0 || f*unit > math.MaxInt32 {
		return 0, bad
	}
	mib := f * unit
	if mib != math.Trunc(mib) {
		return 0, fmt.Errorf("--%s %q: not a whole number of MiB", flag, s)
	}
	return int(mib), nil
}

// parseSeconds parses a duration into whole seconds: a bare integer is seconds; a whole number of days
// ("90d"); otherwise a Go duration ("90s", "10m", "1h30m"), rounded up to the second.
func parseSeconds(what, s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 {
			return 0, fmt.Errorf("%s %q: must be positive", what, s)
		}
		return n, nil
	}
	d, err := time.ParseDuration(s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		if n, err = strconv.Atoi(days); err == nil {
			d = time.Duration(min(n, 100_000)) * 24 * time.Hour // more is too long, below
		}
	}
	if err != nil {
		return 0, fmt.Errorf("%s %q: want seconds (300), days (90d) or a duration (5m, 1h30m)", what, s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s %q: must be positive", what, s)
	}
	if d > time.Duration(math.MaxInt32)*time.Second {
		return 0, fmt.Errorf("%s %q: too long", what, s)
	}
	return int((d + time.Second - 1) / time.Second), nil
}

// remotePath is one side of `airlock cp`: a local path, or a path in a sandbox.
type remotePath struct {
	sandbox string // "" for a local path
	path    string
}

// parseCpArg parses SANDBOX:/path, or a local path. A colon makes it remote only when what precedes it
// contains no slash, so "./a:b" and "/tmp/a:b" are local.
func parseCpArg(s string) (remotePath, error) {
	if s == "" {
		return remotePath{}, errors.New("empty path")
	}
	before, after, ok := strings.Cut(s, ":")
	if !ok || before == "" || strings.Contains(before, "/") {
		return remotePath{path: s}, nil
	}
	if !strings.HasPrefix(after, "/") {
		return remotePath{}, fmt.Errorf("%q: the path in the sandbox must be absolute (%s:/home/user/…)", s, before)
	}
	return remotePath{sandbox: before, path: after}, nil
}
