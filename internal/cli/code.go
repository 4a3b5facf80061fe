package cli

import (
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

func newCodeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "code",
		Short: "Run code in stateful code contexts (Jupyter kernels) of a code-interpreter sandbox or session",
	}
	cmd.AddCommand(newCodeRunCmd(g), newCodeContextCreateCmd(g), newCodeContextsCmd(g), newCodeContextRmCmd(g))
	return cmd
}

func newCodeRunCmd(g *globals) *cobra.Command {
	var req wire.RunCodeRequest
	var env []string
	var saveDir string
	run := &cobra.Command{
		Use:   "run ID [CODE|-]",
		Short: "Run Python code in a context of a sandbox or session; prints its output, value and error",
		Long: `Runs code (the argument, or standard input with - or none) in the sandbox's default code context, or in
--context, and prints its stdout and stderr as they come, then the last expression's value and any error's
traceback. Variables and imports stay for the next run. Charts and other images are written to --save-dir
(result-N.png) when it is given. The exit code is 1 when the code raised an exception.`,
		Example: `  id=$(airlock session create --template code-interpreter)
  airlock code run "$id" 'import pandas as pd; df = pd.DataFrame({"a": [1, 2]}); df.describe()'
  airlock code run "$id" --save-dir charts - < plot.py`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			req.Code = "-"
			if len(args) == 2 {
				req.Code = args[1]
			}
			if req.Code == "-" {
				b, err := io.ReadAll(io.LimitReader(g.In, 1<<20+1))
				if err != nil {
					return err
				}
				req.Code = string(b)
			}
			var err error
			if req.Env, err = parseKV(env, "env", true); err != nil {
				return err
			}
			opts := &airlock.RunCodeOptions{}
			if !g.json {
				opts.OnStdout = func(s string) { fmt.Fprint(g.Out, s) }
				opts.OnStderr = func(s string) { fmt.Fprint(g.Err, s) }
			}
			ex, err := g.client().RunCode(cmd.Context(), args[0], req, opts)
			if done, err := g.jsonOrErr(ex, err); done {
				return err
			}
			for i, r := range ex.Results {
				if saveDir != "" {
					for ext, b64 := range map[string]string{"png": r.PNG, "jpeg": r.JPEG, "svg": r.SVG} {
						if b64 == "" {
							continue
						}
						data := []byte(b64)
						if ext != "svg" {
							if data, err = base64.StdEncoding.DecodeString(strings.ReplaceAll(b64, "\n", "")); err != nil {
								return fmt.Errorf("result %d: %s: %w", i, ext, err)
							}
						}
						name := filepath.Join(saveDir, fmt.Sprintf("result-%d.%s", i, ext))
						if err := os.MkdirAll(saveDir, 0o755); err != nil {
							return err
						}
						if err := os.WriteFile(name, data, 0o644); err != nil {
							return err
						}
						fmt.Fprintf(g.Err, "(wrote %s)\n", name)
					}
				}
				if r.IsMainResult && r.Text != "" {
					fmt.Fprintln(g.Out, r.Text)
				}
			}
			if ex.Error != nil {
				fmt.Fprintf(g.Err, "%s: %s\n%s\n", ex.Error.Name, ex.Error.Value, ex.Error.Traceback)
				return &exitError{code: 1}
			}
			return nil
		},
	}
	f := run.Flags()
	f.StringVar(&req.ContextID, "context", "", "the code context to run in (default: the default one)")
	f.StringArrayVarP(&env, "env", "e", nil, "an environment variable NAME=VALUE for this run only (repeat)")
	f.IntVar(&req.TimeoutSeconds, "timeout", 0, "interrupt the run after this many seconds (default 300)")
	f.StringVar(&saveDir, "save-dir", "", "write the results' images (charts) into this directory")
	return run
}

func newCodeContextCreateCmd(g *globals) *cobra.Command {
	var lang, cwd string
	create := &cobra.Command{
		Use:   "context-create ID",
		Short: "Start a code context of its own (a new kernel) in a sandbox or session; prints its ID",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client().CreateCodeContext(cmd.Context(), args[0], wire.CreateCodeContextRequest{Language: lang, Cwd: cwd})
			if done, err := g.jsonOrErr(c, err); done {
				return err
			}
			fmt.Fprintln(g.Out, c.ID)
			return nil
		},
	}
	create.Flags().StringVar(&lang, "language", "", "the context's language (python)")
	create.Flags().StringVar(&cwd, "cwd", "", "its working directory (default /home/user)")
	return create
}

func newCodeContextsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "contexts ID",
		Short: "List the code contexts of a sandbox or session",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cs, err := g.client().ListCodeContexts(cmd.Context(), args[0])
			if done, err := g.jsonOrErr(cs, err); done {
				return err
			}
			t := newTable(g.Out, "ID", "LANGUAGE", "CWD")
			for _, c := range cs {
				t.row(c.ID, c.Language, c.Cwd)
			}
			return t.flush()
		},
	}
}

func newCodeContextRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "context-rm ID CONTEXT",
		Short: "Stop a code context and its kernel",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.client().DeleteCodeContext(cmd.Context(), args[0], args[1])
		},
	}
}
