package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/api/wire"
)

// The time machine's commands: timeline, restore, pin, unpin.

func newSessionTimelineCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "timeline SESSION",
		Short: "Show a session's snapshots as a tree (restores and forks branch it); * marks the head",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			tl, err := g.client().Timeline(cmd.Context(), args[0])
			if done, err := g.jsonOrErr(tl, err); done {
				return err
			}
			printTimeline(g, tl)
			return nil
		},
	}
}

// printTimeline draws the snapshots as a tree by parent, oldest first: a snapshot whose parent is not
// in the timeline starts a root.
func printTimeline(g *globals, tl *wire.Timeline) {
	in := map[string]bool{}
	for _, sn := range tl.Snapshots {
		in[sn.ID] = true
	}
	children := map[string][]wire.Snapshot{}
	var roots []wire.Snapshot
	for _, sn := range tl.Snapshots {
		if sn.ParentID != "" && in[sn.ParentID] {
			children[sn.ParentID] = append(children[sn.ParentID], sn)
		} else {
			roots = append(roots, sn)
		}
	}
	var walk func(sn wire.Snapshot, prefix string)
	walk = func(sn wire.Snapshot, prefix string) {
		mark := " "
		if sn.ID == tl.HeadSnapshotID {
			mark = "*"
		}
		label := sn.Trigger
		if sn.Name != "" {
			label += " " + sn.Name
		}
		if sn.Pinned {
			label += " (pinned)"
		}
		if sn.State != "complete" {
			label += " [" + sn.State + "]"
		}
		fmt.Fprintf(g.Out, "%s %s%s  %s  %s  +%.1f MiB\n", mark, prefix, sn.ID, sn.CreatedAt.Local().Format(time.DateTime),
			label, float64(sn.StoredBytes)/(1<<20))
		kids := children[sn.ID]
		for i, k := range kids {
			// The first child continues the line; later ones are branches, indented.
			if i == 0 {
				walk(k, prefix)
			} else {
				walk(k, prefix+"  └ ")
			}
		}
	}
	for _, r := range roots {
		walk(r, "")
	}
}

func newSessionRestoreCmd(g *globals) *cobra.Command {
	var to, at string
	cmd := &cobra.Command{
		Use:   "restore SESSION (--to SNAPSHOT | --at TIME)",
		Short: "Move a session back (or forward) to a snapshot or a time; where it was stays in its timeline",
		Example: `  airlock session restore se_… --to sn_…
  airlock session restore se_… --at 2026-11-30T09:15:00Z
  airlock session restore se_… --at 10m    # as it was ten minutes ago`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			if (to == "") == (at == "") {
				return fmt.Errorf("give one of --to SNAPSHOT or --at TIME")
			}
			req := wire.RestoreSessionRequest{SnapshotID: to}
			if at != "" {
				t, err := parseWhen(at, time.Now())
				if err != nil {
					return err
				}
				req.At = &t
			}
			se, err := g.client().RestoreSession(cmd.Context(), args[0], req)
			if done, err := g.jsonOrErr(se, err); done {
				return err
			}
			fmt.Fprintf(g.Out, "%s runs from %s\n", se.ID, se.HeadSnapshotID)
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the snapshot to restore")
	cmd.Flags().StringVar(&at, "at", "", "a time (RFC 3339) or how long ago (10m): the last snapshot taken then")
	return cmd
}

// parseWhen reads a time as RFC 3339, or as a duration before now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--at %q: want a time (2026-11-30T09:15:00Z) or how long ago (10m)", s)
}

func newSessionPinCmd(g *globals, pin bool) *cobra.Command {
	use, short := "pin", "Keep a snapshot whatever the retention says"
	if !pin {
		use, short = "unpin", "Let the retention delete a snapshot again"
	}
	return &cobra.Command{
		Use:   use + " SESSION SNAPSHOT",
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			sn, err := g.client().UpdateSnapshot(cmd.Context(), args[0], args[1], wire.UpdateSnapshotRequest{Pinned: &pin})
			if done, err := g.jsonOrErr(sn, err); done {
				return err
			}
			fmt.Fprintln(g.Out, sn.ID)
			return nil
		},
	}
}

func newSessionCatCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cat SESSION SNAPSHOT PATH",
		Short: "Print a file as a snapshot saved it, without restoring the snapshot",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			data, err := g.client().ReadSnapshotFile(cmd.Context(), args[0], args[1], args[2])
			if err != nil {
				return err
			}
			_, err = g.Out.Write(data)
			return err
		},
	}
}

func newSessionDiffCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "diff SESSION FROM TO [PATH]",
		Short: "What changed in the files between two snapshots; with a PATH, that file's unified diff",
		Args:  cobra.RangeArgs(3, 4),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			if len(args) == 4 {
				d, err := g.client().DiffSnapshotFile(cmd.Context(), args[0], args[1], args[2], args[3])
				if done, err := g.jsonOrErr(d, err); done {
					return err
				}
				if d.Binary {
					fmt.Fprintf(g.Out, "%s: binary or too large to show\n", d.Path)
					return nil
				}
				fmt.Fprint(g.Out, d.Unified)
				return nil
			}
			d, err := g.client().DiffSnapshots(cmd.Context(), args[0], args[1], args[2])
			if done, err := g.jsonOrErr(d, err); done {
				return err
			}
			marks := map[string]string{"added": "+", "removed": "-", "changed": "~"}
			for _, c := range d.Changes {
				size := fmt.Sprintf("%d", c.NewSize)
				switch c.Kind {
				case "removed":
					size = fmt.Sprintf("%d", c.OldSize)
				case "changed":
					size = fmt.Sprintf("%d → %d", c.OldSize, c.NewSize)
				}
				fmt.Fprintf(g.Out, "%s %s  (%s, %s bytes)\n", marks[c.Kind], c.Path, c.Type, size)
			}
			if d.Truncated {
				fmt.Fprintln(g.Out, "… more changes not shown")
			}
			return nil
		},
	}
}

func newRetentionCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "retention",
		Short: "Show how long your sessions' snapshots are kept (set it with 'retention set')",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			rs, err := g.client().Retention(cmd.Context())
			if err != nil {
				return err
			}
			return printRetention(g, rs)
		},
	}
	var rf retentionFlags
	set := &cobra.Command{
		Use:   "set",
		Short: "Set how long your sessions' snapshots are kept; unset flags inherit the server's defaults",
		Example: `  airlock retention set --keep-all 2h --keep-hourly 48h --keep-daily 720h
  airlock retention set     # back to the server's defaults`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			r, err := rf.parse()
			if err != nil {
				return err
			}
			rs, err := g.client().SetRetention(cmd.Context(), r)
			if err != nil {
				return err
			}
			return printRetention(g, rs)
		},
	}
	rf.add(set, "")
	cmd.AddCommand(set)
	return cmd
}

// retentionFlags are --keep-all, --keep-hourly and --keep-daily.
type retentionFlags struct{ all, hourly, daily string }

// add adds the flags to cmd; inherit says what an unset flag means.
func (f *retentionFlags) add(cmd *cobra.Command, inherit string) {
	fl := cmd.Flags()
	fl.StringVar(&f.all, "keep-all", "", "keep every snapshot younger than this"+inherit)
	fl.StringVar(&f.hourly, "keep-hourly", "", "then the newest snapshot of each hour, younger than this"+inherit)
	fl.StringVar(&f.daily, "keep-daily", "", "then the newest snapshot of each day, younger than this"+inherit)
}

// parse reads the flags set: seconds or durations; unset ones stay 0 (inherit).
func (f *retentionFlags) parse() (wire.Retention, error) {
	var r wire.Retention
	for _, k := range []struct {
		flag, v string
		to      *int64
	}{{"--keep-all", f.all, &r.KeepAllSeconds}, {"--keep-hourly", f.hourly, &r.KeepHourlySeconds}, {"--keep-daily", f.daily, &r.KeepDailySeconds}} {
		if k.v != "" {
			n, err := parseSeconds(k.flag, k.v)
			if err != nil {
				return r, err
			}
			*k.to = int64(n)
		}
	}
	return r, nil
}

func printRetention(g *globals, rs *wire.RetentionSettings) error {
	if g.json {
		return printJSON(g.Out, rs)
	}
	d := func(secs int64) string { return (time.Duration(secs) * time.Second).String() }
	e := rs.Effective
	fmt.Fprintf(g.Out, "all snapshots for %s, the newest of each hour for %s, the newest of each day for %s\n",
		d(e.KeepAllSeconds), d(e.KeepHourlySeconds), d(e.KeepDailySeconds))
	return nil
}
