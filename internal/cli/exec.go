package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// execFlags are the flags of exec and shell.
type execFlags struct {
	env         []string
	cwd         string
	user        string
	tty         bool
	interactive bool
}

func (f *execFlags) register(cmd *cobra.Command, withTTY bool) {
	fl := cmd.Flags()
	fl.StringArrayVarP(&f.env, "env", "e", nil, "KEY=VALUE in the process's environment; a bare KEY copies it from here (repeatable)")
	fl.StringVarP(&f.cwd, "cwd", "w", "", "working directory (default: the user's home)")
	fl.StringVarP(&f.user, "user", "u", "", `user to run as: "user" (default), "root", or a uid`)
	if withTTY {
		fl.BoolVarP(&f.tty, "tty", "t", false, "run the command on a terminal (stdin must be one); implies -i")
		fl.BoolVarP(&f.interactive, "interactive", "i", false, "forward stdin even when it is a terminal")
	}
	// Flags after SANDBOX belong to the command: `airlock exec sb ls -la`.
	fl.SetInterspersed(false)
}

func newExecCmd(g *globals) *cobra.Command {
	var f execFlags
	cmd := &cobra.Command{
		Use:   "exec [flags] SANDBOX [--] [COMMAND [ARG...]]",
		Short: "Run a command in a sandbox, streaming its input and output",
		Long: `Run a command in a sandbox and stream its output here; with none, the template's own (an image's
ENTRYPOINT and CMD). Stdin is forwarded when it is a pipe or a
file (or with -i); a terminal on stdin is left alone unless -i or -t is given. The command's exit code
becomes airlock's (128+n when signal n killed it). SIGINT, SIGTERM, SIGHUP and SIGQUIT are passed on to
the command; a third one makes airlock give up and leave the command running.`,
		Example: `  airlock exec sb_… -- python3 -c 'print(6*7)'
  tar c src | airlock exec -w /home/user sb_… -- tar x
  airlock exec -t sb_… -- top`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(stripDash(args)) < 1 {
				return errors.New("want a sandbox, and a command unless its template has one: airlock exec SANDBOX [-- COMMAND [ARG...]]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			args = stripDash(args)
			return g.runProcess(cmd.Context(), args[0], args[1:], f)
		},
	}
	f.register(cmd, true)
	return cmd
}

func newShellCmd(g *globals) *cobra.Command {
	var f execFlags
	cmd := &cobra.Command{
		Use:   "shell [flags] SANDBOX [COMMAND [ARG...]]",
		Short: "Open an interactive terminal in a sandbox (bash -l by default)",
		Long: `Open an interactive terminal in a sandbox: the command (bash -l by default) runs on a terminal in the
sandbox, this terminal is put in raw mode and restored on exit, and window size changes are passed on.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			args = stripDash(args)
			argv := args[1:]
			if len(argv) == 0 {
				argv = []string{"bash", "-l"}
			}
			f.tty = true
			return g.runProcess(cmd.Context(), args[0], argv, f)
		},
	}
	f.register(cmd, false)
	return cmd
}

// stripDash removes a "--" that follows the sandbox argument (with interspersed flags off, the flag
// parser leaves it there).
func stripDash(args []string) []string {
	if len(args) >= 2 && args[1] == "--" {
		return append([]string{args[0]}, args[2:]...)
	}
	return args
}

// forwardedSignals are passed on to the remote process.
var forwardedSignals = map[os.Signal]string{
	syscall.SIGINT:  "INT",
	syscall.SIGTERM: "TERM",
	syscall.SIGHUP:  "HUP",
	syscall.SIGQUIT: "QUIT",
}

// maxForwardedSignals is how many signals are passed on before airlock gives up waiting.
const maxForwardedSignals = 3

// runProcess runs argv in the sandbox id over an exec stream and returns an *exitError carrying its exit
// code when that is not 0.
func (g *globals) runProcess(ctx context.Context, id string, argv []string, f execFlags) error {
	env, err := parseKV(f.env, "env", true)
	if err != nil {
		return err
	}
	stdinFd, stdinIsFile := fdOf(g.In)
	stdinTTY := stdinIsFile && isTerminal(stdinFd)
	req := wire.ExecRequest{Cmd: argv, Env: env, Cwd: f.cwd, User: f.user}
	nl := "\n"
	if f.tty {
		if !stdinTTY {
			return errors.New("a terminal session needs a terminal on stdin; use airlock exec without -t")
		}
		rows, cols, err := termSize(stdinFd)
		if err != nil || rows == 0 || cols == 0 {
			rows, cols = 24, 80 // a terminal that does not know its size
		}
		req.PTY = &wire.PTYSize{Rows: rows, Cols: cols}
		if _, ok := env["TERM"]; !ok {
			if req.Env == nil {
				req.Env = map[string]string{}
			}
			req.Env["TERM"] = os.Getenv("TERM")
			if req.Env["TERM"] == "" {
				req.Env["TERM"] = "xterm-256color"
			}
		}
		nl = "\r\n"
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := g.client().ExecStream(ctx, id, req, airlock.StreamOptions{
		Stdout: g.Out,
		Stderr: g.Err,
		OnDropped: func(stream string, n int64) {
			fmt.Fprintf(g.Err, "%sairlock: %d bytes of %s were lost: the command wrote faster than they were read%s", nl, n, stream, nl)
		},
	})
	if err != nil {
		return err
	}
	defer s.Close()

	if f.tty {
		restore, err := makeRaw(stdinFd)
		if err != nil {
			return err
		}
		defer restore()
	}

	sigs := make(chan os.Signal, 8)
	for sig := range forwardedSignals {
		signal.Notify(sigs, sig)
	}
	if f.tty {
		signal.Notify(sigs, syscall.SIGWINCH)
	}
	defer signal.Stop(sigs)
	go func() {
		forwarded := 0
		for {
			select {
			case <-s.Done():
				return
			case sig := <-sigs:
				if sig == syscall.SIGWINCH {
					if rows, cols, err := termSize(stdinFd); err == nil && rows > 0 && cols > 0 {
						_ = s.Resize(rows, cols)
					}
					continue
				}
				if forwarded++; forwarded >= maxForwardedSignals {
					fmt.Fprintf(g.Err, "%sairlock: giving up; the command may still run (airlock ps %s)%s", nl, id, nl)
					cancel()
					return
				}
				_ = s.Signal(forwardedSignals[sig])
			}
		}
	}()

	if f.tty || f.interactive || !stdinTTY {
		// The copy ends at the end of stdin; on a terminal it may outlive the command, blocked in a read,
		// until the airlock process exits.
		go func() {
			if g.In == nil {
				_ = s.CloseStdin()
				return
			}
			if _, err := io.Copy(s, g.In); err == nil {
				_ = s.CloseStdin()
			}
		}()
	} else if err := s.CloseStdin(); err != nil && !errors.Is(err, airlock.ErrStreamClosed) {
		return err
	}

	code, err := s.Wait()
	if err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return &exitError{code: 130}
		}
		return err
	}
	if c := exitCode(code, s.ExitSignal()); c != 0 {
		return &exitError{code: c}
	}
	return nil
}
