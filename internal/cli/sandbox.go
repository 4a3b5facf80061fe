package cli

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// interruptible cancels the command's context on SIGINT and SIGTERM, for commands that only call the API.
func interruptible(cmd *cobra.Command) func() {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	cmd.SetContext(ctx)
	return stop
}

func newSandboxCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "sandbox",
		Aliases: []string{"sb"},
		Short:   "Create, list, inspect and remove sandboxes",
	}
	cmd.AddCommand(newCreateCmd(g), newLsCmd(g), newGetCmd(g), newRmCmd(g), newTimeoutCmd(g), newNetworkCmd(g), newEgressCmd(g), newMetricsCmd(g))
	return cmd
}

func newCreateCmd(g *globals) *cobra.Command {
	var timeout, idemKey string
	var rf resourceFlags
	var nf networkFlags
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create and boot a sandbox; prints its ID",
		Long: `Create and boot a sandbox and print its ID (the whole sandbox with --json).

A sandbox that fails to boot is still created, in state "failed" with a reason: then the command prints
it and exits with status 1.`,
		Example: `  airlock sandbox create --cpu 2 --memory 2G --timeout 1h --metadata owner=alice
  airlock sandbox create --env OPENAI_API_KEY --env DEBUG=1
  airlock sandbox create --allow api.openai.com:443 --allow '*.pypi.org:443'
  airlock sandbox create --runtime runc`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			r, err := rf.parse()
			if err != nil {
				return err
			}
			req := wire.CreateSandboxRequest{Template: r.template, CPU: r.cpu, MemoryMB: r.memoryMB, DiskMB: r.diskMB,
				Env: r.env, Metadata: r.metadata, Runtime: r.runtime}
			if req.TimeoutSeconds, err = parseSeconds("--timeout", timeout); err != nil {
				return err
			}
			if nf.set() {
				if req.Network, err = nf.policy(); err != nil {
					return err
				}
			}
			sb, err := g.client().CreateSandbox(cmd.Context(), req, idempotency(idemKey)...)
			if err != nil {
				return err
			}
			return printCreated(g, sb, sb.ID, "sandbox", sb.State == wire.StateFailed, sb.Reason)
		},
	}
	f := cmd.Flags()
	rf.add(cmd, "every process's environment")
	f.StringVar(&timeout, "timeout", "", "lifetime: seconds, or a duration such as 30m; default 5m")
	f.StringVar(&idemKey, "idempotency-key", "", "a key that makes retries of this create return the same sandbox")
	nf.add(cmd)
	return cmd
}

// idempotency returns the call options for an --idempotency-key ("" none).
func idempotency(key string) []airlock.CallOption {
	if key == "" {
		return nil
	}
	return []airlock.CallOption{airlock.WithIdempotencyKey(key)}
}

// printCreated prints a created object (its ID, or all of it with --json), and fails the command if it
// failed to start.
func printCreated(g *globals, v any, id, what string, failed bool, reason string) error {
	if g.json {
		if err := printJSON(g.Out, v); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(g.Out, id)
	}
	if failed {
		return fmt.Errorf("%s %s failed to start: %s", what, id, reason)
	}
	return nil
}

// resourceFlags are the flags a sandbox and a session are created with.
type resourceFlags struct {
	template, cpu, memory, disk, runtime string
	env, metadata                        []string
}

func (rf *resourceFlags) add(cmd *cobra.Command, envWhere string) {
	f := cmd.Flags()
	f.StringVar(&rf.template, "template", "", `the template to boot: a name, or name@sha256:… for exactly that version (default "default"; airlock template ls)`)
	f.StringVar(&rf.cpu, "cpu", "", "CPU quota: cores (0.5, 2) or millicores (500m); default 1 core")
	f.StringVar(&rf.memory, "memory", "", "memory limit: MiB, or a size such as 2G; default 512 MiB")
	f.StringVar(&rf.disk, "disk", "", "size of the writable disk: MiB, or a size such as 4G; default 1 GiB")
	f.StringArrayVarP(&rf.env, "env", "e", nil, "KEY=VALUE in "+envWhere+"; a bare KEY copies it from here (repeatable)")
	f.StringArrayVarP(&rf.metadata, "metadata", "l", nil, "KEY=VALUE label (repeatable)")
	f.StringVar(&rf.runtime, "runtime", "", `the runtime: gvisor (the default), runc (faster start, weaker isolation), vm (a microVM: vm:qemu, vm:firecracker) or auto (the server chooses); the tenant and the template must allow it`)
}

// resources are parsed resourceFlags.
type resources struct {
	template, runtime     string
	cpu, memoryMB, diskMB int
	env, metadata         map[string]string
}

func (rf *resourceFlags) parse() (resources, error) {
	r := resources{template: rf.template, runtime: rf.runtime}
	var err error
	if r.cpu, err = parseCPU(rf.cpu); err != nil {
		return r, err
	}
	if r.memoryMB, err = parseMiB("memory", rf.memory); err != nil {
		return r, err
	}
	if r.diskMB, err = parseMiB("disk", rf.disk); err != nil {
		return r, err
	}
	if r.env, err = parseKV(rf.env, "env", true); err != nil {
		return r, err
	}
	if r.metadata, err = parseKV(rf.metadata, "metadata", false); err != nil {
		return r, err
	}
	return r, nil
}

func newLsCmd(g *globals) *cobra.Command {
	var states, metadata []string
	var limit int
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sandboxes, newest first",
		Example: `  airlock sandbox ls --state running,failed --metadata owner=alice`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			md, err := parseKV(metadata, "metadata", false)
			if err != nil {
				return err
			}
			if limit < 0 {
				return fmt.Errorf("--limit %d: must not be negative", limit)
			}
			opts := airlock.ListOptions{Metadata: md}
			for _, s := range states {
				if s = strings.TrimSpace(s); s != "" {
					opts.States = append(opts.States, s)
				}
			}
			if limit > 0 {
				opts.Limit = min(limit, 1000)
			}
			list := wire.SandboxList{Sandboxes: []wire.Sandbox{}}
			for sb, err := range g.client().AllSandboxes(cmd.Context(), opts) {
				if err != nil {
					return err
				}
				list.Sandboxes = append(list.Sandboxes, sb)
				if limit > 0 && len(list.Sandboxes) >= limit {
					break
				}
			}
			if g.json {
				return printJSON(g.Out, list)
			}
			now := time.Now()
			t := newTable(g.Out, "ID", "STATE", "TEMPLATE", "NODE", "CREATED", "ENDS", "REASON")
			for _, sb := range list.Sandboxes {
				ends := "-"
				if sb.State == wire.StateRunning || sb.State == wire.StateCreating {
					ends = relTime(sb.EndsAt, now)
				}
				t.row(sb.ID, sb.State, sb.Template, dash(sb.Node), relTime(&sb.CreatedAt, now), ends, truncate(sb.Reason, 60))
			}
			return t.flush()
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&states, "state", nil, "only these states: creating, running, stopping, stopped, failed (comma-separated or repeated)")
	f.StringArrayVarP(&metadata, "metadata", "l", nil, "only sandboxes with this KEY=VALUE label (repeatable)")
	f.IntVar(&limit, "limit", 0, "list at most this many (default: all)")
	return cmd
}

func newGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "get SANDBOX",
		Aliases: []string{"inspect"},
		Short:   "Show a sandbox",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			sb, err := g.client().GetSandbox(cmd.Context(), args[0])
			if done, err := g.jsonOrErr(sb, err); done {
				return err
			}
			return printSandbox(g, sb, time.Now())
		},
	}
}

// printSandbox writes a sandbox for people, one field a line.
func printSandbox(g *globals, sb *wire.Sandbox, now time.Time) error {
	t := newTable(g.Out, "ID:", sb.ID)
	t.row("State:", sb.State)
	if sb.Reason != "" {
		t.row("Reason:", sb.Reason)
	}
	t.row("Template:", sb.Template)
	if sb.Node != "" {
		t.row("Node:", sb.Node)
	}
	if sb.Runtime != "" {
		rt := sb.Runtime
		if sb.RuntimeReason != "" {
			rt += " (" + sb.RuntimeReason + ")"
		}
		t.row("Runtime:", rt)
		if len(sb.Abilities) > 0 {
			t.row("Abilities:", strings.Join(sb.Abilities, ", "))
		}
	}
	t.row("CPU:", fmt.Sprintf("%dm", sb.CPU))
	t.row("Memory:", fmt.Sprintf("%d MiB", sb.MemoryMB))
	t.row("Disk:", fmt.Sprintf("%d MiB", sb.DiskMB))
	t.row("Timeout:", (time.Duration(sb.TimeoutSeconds) * time.Second).String())
	for _, f := range []struct {
		name string
		t    *time.Time
	}{{"Created:", &sb.CreatedAt}, {"Started:", sb.StartedAt}, {"Ends:", sb.EndsAt}, {"Stopped:", sb.StoppedAt}} {
		if f.t != nil && !f.t.IsZero() {
			t.row(f.name, fmt.Sprintf("%s (%s)", f.t.Local().Format(time.DateTime), relTime(f.t, now)))
		}
	}
	keys := make([]string, 0, len(sb.Metadata))
	for k := range sb.Metadata {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		name := ""
		if i == 0 {
			name = "Metadata:"
		}
		t.row(name, k+"="+sb.Metadata[k])
	}
	return t.flush()
}

func newRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm SANDBOX...",
		Aliases: []string{"remove", "delete"},
		Short:   "Destroy sandboxes and everything in them",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			return g.deleteEach(cmd.Context(), args, g.client().DeleteSandbox)
		},
	}
}

func newTimeoutCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "timeout SANDBOX SECONDS",
		Short:   "Make a running sandbox end SECONDS from now (or a duration such as 30m)",
		Example: "  airlock sandbox timeout sb_… 3600\n  airlock sandbox timeout sb_… 2h",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			secs, err := parseSeconds("timeout", args[1])
			if err != nil {
				return err
			}
			sb, err := g.client().SetTimeout(cmd.Context(), args[0], secs)
			if done, err := g.jsonOrErr(sb, err); done {
				return err
			}
			if sb.EndsAt != nil {
				fmt.Fprintf(g.Out, "%s ends at %s (%s)\n", sb.ID, sb.EndsAt.Local().Format(time.DateTime), relTime(sb.EndsAt, time.Now()))
			}
			return nil
		},
	}
}
