package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/api/wire"
)

func newPsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ps SANDBOX",
		Short: "List the processes started in a sandbox, running or exited",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			l, err := g.client().ListProcesses(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.json {
				if l.Processes == nil {
					l.Processes = []wire.Process{}
				}
				return printJSON(g.Out, l)
			}
			now := time.Now()
			t := newTable(g.Out, "ID", "PID", "USER", "TTY", "STATUS", "STARTED", "COMMAND")
			for _, p := range l.Processes {
				tty := "no"
				if p.PTY {
					tty = "yes"
				}
				t.row(p.ID, fmt.Sprint(p.PID), p.User, tty, processStatus(p), relTime(&p.StartedAt, now), truncate(shellJoin(p.Cmd), 80))
			}
			return t.flush()
		},
	}
}

// processStatus describes whether and how a process ended: "running", "exited 0", "killed KILL".
func processStatus(p wire.Process) string {
	switch {
	case p.Running:
		return "running"
	case p.Signal != "":
		return "killed " + p.Signal
	case p.ExitCode != nil:
		return fmt.Sprintf("exited %d", *p.ExitCode)
	default:
		return "exited"
	}
}
