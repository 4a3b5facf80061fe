package apiutil

import (
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// maxUnixSeconds is the last second of year 9999, the latest time a window may name.
const maxUnixSeconds = 253402300799

// parseMetricsTime reads a bound of a metrics window: unix seconds or an RFC 3339 time. An end given in
// seconds covers that whole second (E2B's SDKs round the present to seconds, down as often as up).
func parseMetricsTime(name, v string, end bool) (time.Time, error) {
	if v != "" && strings.Trim(v, "0123456789") == "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > maxUnixSeconds {
			return time.Time{}, ClientErr(errdefs.ErrInvalidArgument, "%s %q: unix seconds must be at most %d", name, Truncate(v, 32), int64(maxUnixSeconds))
		}
		t := time.Unix(n, 0).UTC()
		if end {
			t = t.Add(time.Second - 1)
		}
		return t, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, ClientErr(errdefs.ErrInvalidArgument, "%s %q: want unix seconds or an RFC 3339 time such as 2026-01-02T15:04:05Z", name, Truncate(v, 64))
	}
	return t, nil
}

// ParseMetricsWindow reads start and end of a metrics request, each optional and given at most once;
// strict refuses every other parameter (/v1's routes; E2B's let them pass). start after end is an
// invalid argument.
func ParseMetricsWindow(q url.Values, strict bool) (start, end time.Time, err error) {
	for k, vs := range q {
		switch k {
		case "start", "end":
		default:
			if strict {
				return start, end, ClientErr(errdefs.ErrInvalidArgument, "unknown query parameter %q: want start or end", Truncate(k, 64))
			}
			continue
		}
		if len(vs) != 1 {
			return start, end, ClientErr(errdefs.ErrInvalidArgument, "query parameter %q is given %d times; give it once", k, len(vs))
		}
		t, err := parseMetricsTime(k, vs[0], k == "end")
		if err != nil {
			return start, end, err
		}
		if k == "start" {
			start = t
		} else {
			end = t
		}
	}
	if !start.IsZero() && !end.IsZero() && start.After(end) {
		return start, end, ClientErr(errdefs.ErrInvalidArgument, "start %s is after end %s", start.Format(time.RFC3339), end.Format(time.RFC3339))
	}
	return start, end, nil
}
