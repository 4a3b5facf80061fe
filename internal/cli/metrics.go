package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/sdk/go/airlock"
)

func newMetricsCmd(g *globals) *cobra.Command {
	var since, until string
	cmd := &cobra.Command{
		Use:   "metrics SANDBOX|SESSION",
		Short: "Show a sandbox's or a session's CPU, memory and disk use",
		Long: `Show the resource use of a sandbox, or of the sandbox that runs a session (se_…), oldest first: its
node reads it every 5 s and keeps the last hour, and the last line is read now. CPU is in percent of the
sandbox's CPUs over the interval before each line; memory is its working set (with the host page cache
charged to it) and its limit; disk is its writable disk's use and size. A paused session or a stopped
sandbox has none.`,
		Example: `  airlock sandbox metrics sb_…
  airlock sandbox metrics se_… --since 10m
  airlock sandbox metrics sb_… --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			now := time.Now()
			var opts airlock.MetricsOptions
			var err error
			if opts.Start, err = parseSince("--since", since, now); err != nil {
				return err
			}
			if opts.End, err = parseSince("--until", until, now); err != nil {
				return err
			}
			c := g.client()
			get := c.SandboxMetrics
			if strings.HasPrefix(args[0], "se_") {
				get = c.SessionMetrics
			}
			l, err := get(cmd.Context(), args[0], opts)
			if done, err := g.jsonOrErr(l, err); done {
				return err
			}
			t := newTable(g.Out, "TIME", "CPU", "MEMORY", "CACHE", "DISK")
			for _, m := range l.Metrics {
				t.row(m.Time.Local().Format(time.TimeOnly), fmt.Sprintf("%.1f%% of %d", m.CPUUsedPct, m.CPUCount),
					mib(m.MemoryUsedBytes)+" / "+mib(m.MemoryTotalBytes), mib(m.MemoryCacheBytes),
					mib(m.DiskUsedBytes)+" / "+mib(m.DiskTotalBytes))
			}
			return t.flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&since, "since", "", "only readings since: a duration before now (10m) or an RFC 3339 time")
	fl.StringVar(&until, "until", "", "only readings until: a duration before now or an RFC 3339 time (none: up to now)")
	return cmd
}

// mib formats a byte count in MiB, with one decimal under 10 MiB.
func mib(b int64) string {
	m := float64(b) / (1 << 20)
	if m < 10 {
		return strconv.FormatFloat(m, 'f', 1, 64) + " MiB"
	}
	return strconv.FormatFloat(m, 'f', 0, 64) + " MiB"
}
