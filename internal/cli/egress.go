package cli

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// parseSince reads a point in time given as an RFC 3339 time or as a duration before now ("10m").
func parseSince(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%s %q: want a duration before now (10m, 2h) or an RFC 3339 time", flag, s)
	}
	return now.Add(-d), nil
}

func newEgressCmd(g *globals) *cobra.Command {
	var opts airlock.EgressOptions
	var since, until string
	cmd := &cobra.Command{
		Use:   "egress SANDBOX",
		Short: "Show a sandbox's network flows, newest first",
		Long: `Show the connections a sandbox opened, or tried to open, through the network gateway (and each plain
HTTP request), newest first: destination, protocol, decision, the rule that decided, and the bytes each
way. A flow shows once it ended. A stopped sandbox's flows stay readable.`,
		Example: `  airlock sandbox egress sb_…
  airlock sandbox egress sb_… --decision deny --since 10m
  airlock sandbox egress sb_… --host api.openai.com --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			now := time.Now()
			var err error
			if opts.Since, err = parseSince("--since", since, now); err != nil {
				return err
			}
			if opts.Until, err = parseSince("--until", until, now); err != nil {
				return err
			}
			if opts.Limit < 0 {
				return fmt.Errorf("--limit %d: must not be negative", opts.Limit)
			}
			l, err := g.client().Egress(cmd.Context(), args[0], opts)
			if done, err := g.jsonOrErr(l, err); done {
				return err
			}
			t := newTable(g.Out, "ENDED", "DECISION", "PROTO", "DESTINATION", "REQUEST", "RULE", "SENT", "RECEIVED", "DURATION")
			for _, f := range l.Flows {
				dst := net.JoinHostPort(f.DstIP, strconv.Itoa(f.DstPort))
				if f.Host != "" {
					dst = f.Host + " (" + dst + ")"
				}
				req := ""
				if f.Method != "" {
					req = f.Method + " " + truncate(f.Path, 60)
				}
				rule := f.Rule
				if f.Error != "" {
					rule += " (" + truncate(f.Error, 60) + ")"
				}
				end := f.End
				t.row(relTime(&end, now), f.Decision, f.Protocol, dst, req, rule, strconv.FormatInt(f.BytesSent, 10),
					strconv.FormatInt(f.BytesReceived, 10), (time.Duration(f.DurationMS) * time.Millisecond).String())
			}
			return t.flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Decision, "decision", "", "only flows with this decision: allow or deny")
	fl.StringVar(&opts.Host, "host", "", "only flows to this exact destination name or IP")
	fl.StringVar(&opts.HostContains, "host-contains", "", "only flows whose destination name contains this")
	fl.StringVar(&since, "since", "", "only flows that ended since: a duration before now (10m) or an RFC 3339 time")
	fl.StringVar(&until, "until", "", "only flows that started before: a duration before now or an RFC 3339 time")
	fl.IntVar(&opts.Limit, "limit", 0, "show at most this many, 1 to 1000 (default 100)")
	return cmd
}
