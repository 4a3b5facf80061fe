package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/auditship"
	"github.com/airlockrun/airlock/internal/store"
)

func newAuditCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Export and verify your tenant's audit log (with an admin key)",
		Long: `The audit log records every API call of the tenant (who, what, result), the messages on its sandboxes'
daemon channels, and its egress decisions. Each entry carries the hash of the one before it, so that a
changed, removed or reordered entry shows: "airlock audit verify" names the first one.`,
	}
	var fromMiddle bool
	var xf auditship.Flags
	export := &cobra.Command{
		Use:     "export",
		Short:   "Write the audit log to stdout as JSON lines, or ship it to a file, S3 or syslog",
		Long:    auditship.Help,
		Example: auditship.Example,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			return xf.Export(cmd.Context(), g.client().ExportAudit, g.Out, g.Err)
		},
	}
	xf.AddFlags(export.Flags())
	verify := &cobra.Command{
		Use:   "verify [FILE]",
		Short: "Check the hash chain of an exported audit log (a file, - for stdin, or the server's log)",
		Long: `Check an audit log export: every entry must follow the one before it and carry its own hash. Prints
the number of entries and the last hash when the chain holds; otherwise names the first line that does
not hold and exits with 1. Without FILE it fetches the log from the server.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			var in io.Reader
			switch {
			case len(args) == 0:
				rc, err := g.client().ExportAudit(cmd.Context(), 0)
				if err != nil {
					return err
				}
				defer rc.Close()
				in = rc
			case args[0] == "-":
				in = g.In
			default:
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			return verifyAudit(g, in, fromMiddle)
		},
	}
	verify.Flags().BoolVar(&fromMiddle, "from-middle", false, "the export starts after the log's first entry (export --after): trust its first entry's place in the chain")
	cmd.AddCommand(export, verify, newLogRetentionCmd(g))
	return cmd
}

func newLogRetentionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "retention [DURATION|default]",
		Short: "Show or set how long your audit and flow logs are kept",
		Long: `Without an argument, show how long your logs (the audit log and your sandboxes' flow logs) are kept.
With one, set it: seconds, days (90d) or a duration (720h); "default" takes the server's default again.
Older audit entries are deleted by the server's next pass (every few minutes), which appends an entry
recording the cut: "airlock audit verify" still checks the chain from the log's new first entry.`,
		Example: `  airlock audit retention 90d
  airlock audit retention default`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			var lr *wire.LogRetention
			var err error
			switch {
			case len(args) == 0:
				lr, err = g.client().LogRetention(cmd.Context())
			case args[0] == "default":
				lr, err = g.client().SetLogRetention(cmd.Context(), 0)
			default:
				n, perr := parseSeconds("retention", args[0])
				if perr != nil {
					return perr
				}
				lr, err = g.client().SetLogRetention(cmd.Context(), int64(n))
			}
			if done, err := g.jsonOrErr(lr, err); done {
				return err
			}
			keep := "forever"
			if lr.EffectiveSeconds > 0 {
				keep = humanSeconds(lr.EffectiveSeconds)
			}
			from := "the server's default"
			if lr.Seconds > 0 {
				from = "your setting"
			}
			fmt.Fprintf(g.Out, "logs kept %s (%s)\n", keep, from)
			return nil
		},
	}
}

// humanSeconds writes n seconds as whole days when it is, else as a Go duration.
func humanSeconds(n int64) string {
	if n%86400 == 0 {
		return fmt.Sprintf("%dd", n/86400)
	}
	return (time.Duration(n) * time.Second).String()
}

// verifyAudit reads an export and checks its chain, line by line.
func verifyAudit(g *globals, in io.Reader, fromMiddle bool) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var entries []store.AuditEntry
	var lines []int
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var e wire.AuditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintf(g.Out, "line %d: not an audit entry: %v\n", n, err)
			return &exitError{code: 1}
		}
		entries = append(entries, store.AuditEntry{TenantID: e.Tenant, Seq: e.Seq, Time: e.Time, Kind: e.Kind, Actor: e.Actor,
			Action: e.Action, Target: e.Target, Result: e.Result, Detail: e.Detail, Sealed: e.Sealed, Salt: e.Salt, Prev: e.Prev, Hash: e.Hash})
		lines = append(lines, n)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(entries) == 0 {
		fmt.Fprintln(g.Out, "no entries")
		return nil
	}
	i, why := store.VerifyAudit(entries, fromMiddle)
	if i >= 0 {
		fmt.Fprintf(g.Out, "line %d (seq %d) does not hold: %s\n", lines[i], entries[i].Seq, why)
		return &exitError{code: 1}
	}
	last := entries[len(entries)-1]
	fmt.Fprintf(g.Out, "ok: %d entries (seq %d..%d), chain intact; last hash %s\n", len(entries), entries[0].Seq, last.Seq, last.Hash)
	return nil
}
