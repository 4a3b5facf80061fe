package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

func newAuditCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Export and verify your tenant's audit log (with an admin key)",
		Long: `The audit log records every API call of the tenant (who, what, result), the messages on its sandboxes'
daemon channels, and its egress decisions. Each entry carries the hash of the one before it, so that a
changed, removed or reordered entry shows: "airlock audit verify" names the first one.`,
	}
	var after int64
	var fromMiddle bool
	export := &cobra.Command{
		Use:   "export",
		Short: "Write the audit log to stdout as JSON lines",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			rc, err := g.client().ExportAudit(cmd.Context(), after)
			if err != nil {
				return err
			}
			defer rc.Close()
			_, err = io.Copy(g.Out, rc)
			return err
		},
	}
	export.Flags().Int64Var(&after, "after", 0, "start after this entry's sequence number")
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
	cmd.AddCommand(export, verify)
	return cmd
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
		var e airlock.AuditEntry
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
