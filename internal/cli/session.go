package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

func newSessionCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "session",
		Aliases: []string{"se"},
		Short:   "Long-lived work: create, pause, resume, fork and snapshot sessions",
		Long: `A session runs in one sandbox at a time. Pausing it saves the sandbox's memory, processes and files into
an encrypted snapshot and destroys the sandbox; resuming restores a new sandbox from it and the processes
continue; forking restores one snapshot into new sessions. A session pauses by itself when idle and
resumes when work arrives. exec, shell, cp and ps take a session ID wherever they take a sandbox.`,
	}
	cmd.AddCommand(newSessionCreateCmd(g), newSessionLsCmd(g), newSessionGetCmd(g),
		newSessionActionCmd(g, "pause", "Snapshot a running session and destroy its sandbox", (*airlock.Client).PauseSession),
		newSessionActionCmd(g, "resume", "Restore a paused session into a new sandbox", (*airlock.Client).ResumeSession),
		newSessionTimeoutCmd(g),
		newSessionRmCmd(g), newSessionForkCmd(g), newSessionSnapshotCmd(g), newSessionSnapshotsCmd(g),
		newSessionTimelineCmd(g), newSessionRestoreCmd(g), newSessionPinCmd(g, true), newSessionPinCmd(g, false),
		newSessionDiffCmd(g), newSessionCatCmd(g))
	return cmd
}

func newSessionCreateCmd(g *globals) *cobra.Command {
	var idle, idemKey, rolling, timeout, onTimeout string
	var retf retentionFlags
	var rf resourceFlags
	var noAutoResume bool
	var nf networkFlags
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a session and boot its first sandbox; prints its ID",
		Example: `  airlock session create --memory 2G --idle-timeout 30m --metadata task=refactor
  airlock session create --allow api.openai.com:443 --idle-timeout 0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			r, err := rf.parse()
			if err != nil {
				return err
			}
			req := wire.CreateSessionRequest{Template: r.template, CPU: r.cpu, MemoryMB: r.memoryMB, DiskMB: r.diskMB,
				Env: r.env, Metadata: r.metadata, Runtime: r.runtime}
			if idle != "" {
				n := 0
				if idle != "0" {
					if n, err = parseSeconds("--idle-timeout", idle); err != nil {
						return err
					}
				}
				req.IdleTimeoutSeconds = &n
			}
			if timeout != "" && timeout != "0" {
				if req.TimeoutSeconds, err = parseSeconds("--timeout", timeout); err != nil {
					return err
				}
			}
			req.OnTimeout = onTimeout
			if noAutoResume {
				f := false
				req.AutoResume = &f
			}
			if rolling != "" {
				n := 0
				if rolling != "0" {
					if n, err = parseSeconds("--rolling-interval", rolling); err != nil {
						return err
					}
				}
				req.RollingIntervalSeconds = &n
			}
			ret, err := retf.parse()
			if err != nil {
				return err
			}
			if ret != (wire.Retention{}) {
				req.Retention = &ret
			}
			if nf.set() {
				if req.Network, err = nf.policy(); err != nil {
					return err
				}
			}
			se, err := g.client().CreateSession(cmd.Context(), req, idempotency(idemKey)...)
			if err != nil {
				return err
			}
			return printCreated(g, se, se.ID, "session", se.State == wire.SessionFailed, se.Reason)
		},
	}
	f := cmd.Flags()
	rf.add(cmd, "the first sandbox's environment")
	f.StringVar(&idle, "idle-timeout", "", "pause after this long without exec or file work: seconds or a duration (10m); 0 never; default 10m")
	f.StringVar(&timeout, "timeout", "", "end each run (from create or a resume) this long after it began: seconds or a duration (1h); default none")
	f.StringVar(&onTimeout, "on-timeout", "", `what the end of a run does: "delete" (the default) or "pause"`)
	f.BoolVar(&noAutoResume, "no-auto-resume", false, "do not resume the paused session when work arrives for it")
	f.StringVar(&rolling, "rolling-interval", "", "take a rolling snapshot this often while it runs and changes: seconds or a duration (1m); 0 never; at least 15s; default 1m")
	retf.add(cmd, " (default: the tenant's; out of the box 1h, 24h, 168h)")
	f.StringVar(&idemKey, "idempotency-key", "", "a key that makes retries of this create return the same session")
	nf.add(cmd)
	return cmd
}

func newSessionLsCmd(g *globals) *cobra.Command {
	var states []string
	var all bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sessions (not deleted ones, unless --all or --state says so)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			if len(states) == 0 && !all {
				states = []string{wire.SessionCreating, wire.SessionRunning, wire.SessionPausing, wire.SessionPaused,
					wire.SessionResuming, wire.SessionFailed, wire.SessionDeleting}
			}
			opts := airlock.ListOptions{States: states}
			all := wire.SessionList{Sessions: []wire.Session{}}
			for se, err := range g.client().AllSessions(cmd.Context(), opts) {
				if err != nil {
					return err
				}
				all.Sessions = append(all.Sessions, se)
			}
			if g.json {
				return printJSON(g.Out, all)
			}
			t := newTable(g.Out, "ID", "STATE", "SANDBOX", "NODE", "HEAD SNAPSHOT", "LAST ACTIVITY", "REASON")
			for _, se := range all.Sessions {
				t.row(se.ID, se.State, dash(se.SandboxID), dash(se.Node), dash(se.HeadSnapshotID), se.LastActivityAt.Local().Format(time.DateTime), se.Reason)
			}
			return t.flush()
		},
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "keep sessions in these states (running,paused,…)")
	cmd.Flags().BoolVar(&all, "all", false, "list deleted sessions too")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newSessionGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get SESSION",
		Short: "Show a session",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			se, err := g.client().GetSession(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(g.Out, se)
		},
	}
}

func newSessionActionCmd(g *globals, name, short string, call func(*airlock.Client, context.Context, string) (*wire.Session, error)) *cobra.Command {
	return &cobra.Command{
		Use:   name + " SESSION",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			start := time.Now()
			se, err := call(g.client(), cmd.Context(), args[0])
			if done, err := g.jsonOrErr(se, err); done {
				return err
			}
			fmt.Fprintf(g.Out, "%s %s in %s\n", se.ID, se.State, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
}

func newSessionTimeoutCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "timeout SESSION SECONDS",
		Short:   "End each run of a session SECONDS after it began (a running one: from now); 0 for no end",
		Example: "  airlock session timeout se_… 2h\n  airlock session timeout se_… 0",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			secs := 0
			if args[1] != "0" {
				var err error
				if secs, err = parseSeconds("timeout", args[1]); err != nil {
					return err
				}
			}
			se, err := g.client().SetSessionTimeout(cmd.Context(), args[0], secs)
			if done, err := g.jsonOrErr(se, err); done {
				return err
			}
			switch {
			case se.EndsAt != nil:
				fmt.Fprintf(g.Out, "%s ends at %s (%s), then %s\n", se.ID, se.EndsAt.Local().Format(time.DateTime), relTime(se.EndsAt, time.Now()), onTimeoutVerb(se.OnTimeout))
			case secs > 0:
				fmt.Fprintf(g.Out, "%s is %s; each run ends %ds after it begins\n", se.ID, se.State, secs)
			default:
				fmt.Fprintf(g.Out, "%s has no timeout\n", se.ID)
			}
			return nil
		},
	}
}

// onTimeoutVerb is what a session's timeout does, for people.
func onTimeoutVerb(action string) string {
	if action == "pause" {
		return "pauses"
	}
	return "is deleted"
}

func newSessionRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm SESSION...",
		Aliases: []string{"remove", "delete"},
		Short:   "Delete sessions: their sandboxes and the snapshots no fork needs",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			return g.deleteEach(cmd.Context(), args, g.client().DeleteSession)
		},
	}
}

func newSessionForkCmd(g *globals) *cobra.Command {
	var req wire.ForkSessionRequest
	var idemKey string
	cmd := &cobra.Command{
		Use:   "fork SESSION",
		Short: "Make new sessions from a session's current state (or a snapshot); prints their IDs",
		Example: `  airlock session fork se_… --count 10
  airlock session fork se_… --snapshot sn_…`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			res, err := g.client().ForkSession(cmd.Context(), args[0], req, idempotency(idemKey)...)
			if done, err := g.jsonOrErr(res, err); done {
				return err
			}
			var bad []string
			for _, se := range res.Sessions {
				fmt.Fprintln(g.Out, se.ID)
				if se.State != wire.SessionRunning {
					bad = append(bad, se.ID+": "+se.Reason)
				}
			}
			if len(bad) > 0 {
				return fmt.Errorf("%d forks did not start:\n%s", len(bad), strings.Join(bad, "\n"))
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&req.Count, "count", 1, "how many sessions to make (1-100)")
	cmd.Flags().StringVar(&req.SnapshotID, "snapshot", "", "fork from this snapshot instead of the current state")
	cmd.Flags().StringVar(&idemKey, "idempotency-key", "", "a key that makes retries of this fork return the same sessions")
	return cmd
}

func newSessionSnapshotCmd(g *globals) *cobra.Command {
	var req wire.CreateSnapshotRequest
	var wait bool
	cmd := &cobra.Command{
		Use:   "snapshot SESSION",
		Short: "Snapshot a running session now; it keeps running. Prints the snapshot's ID",
		Long: `Snapshot a running session now; it keeps running. The snapshot is usable as soon as this returns
(state "uploading": saved on its node, which can resume and fork from it); --wait also waits until the
snapshot store holds it (state "complete", completed_at set). Only then can another node restore it: if
the session's node is lost, a failover resumes the session from its newest complete snapshot, so wait
before you count on a snapshot surviving its node.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			sn, err := g.client().SnapshotSession(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if wait {
				if sn, err = g.client().WaitSnapshot(cmd.Context(), args[0], sn.ID); err != nil {
					return err
				}
			}
			if g.json {
				return printJSON(g.Out, sn)
			}
			fmt.Fprintln(g.Out, sn.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Name, "name", "", "a name for the snapshot, unique within the session")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the snapshot store holds the snapshot (state complete)")
	return cmd
}

func newSessionSnapshotsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "snapshots SESSION",
		Short: "List a session's snapshots, oldest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			all := wire.SnapshotList{Snapshots: []wire.Snapshot{}}
			for sn, err := range g.client().AllSnapshots(cmd.Context(), args[0], airlock.ListOptions{}) {
				if err != nil {
					return err
				}
				all.Snapshots = append(all.Snapshots, sn)
			}
			if g.json {
				return printJSON(g.Out, all)
			}
			t := newTable(g.Out, "ID", "NAME", "TRIGGER", "STATE", "CREATED", "SIZE", "NEW BYTES")
			for _, sn := range all.Snapshots {
				t.row(sn.ID, dash(sn.Name), sn.Trigger, sn.State, sn.CreatedAt.Local().Format(time.DateTime),
					fmt.Sprintf("%.1f MiB", float64(sn.LogicalBytes)/(1<<20)), fmt.Sprintf("%.1f MiB", float64(sn.StoredBytes)/(1<<20)))
			}
			return t.flush()
		},
	}
}
