// Package cli is the airlock command: `airlock up` runs the server (the daemon inside each sandbox is a
// binary of its own, cmd/airlock-daemon), and every other command is a client of the API, for people
// (tables, terminals) and for scripts (--json, exit codes).
//
// Errors are printed as "airlock: <message>" on stderr with exit code 1; `airlock exec` and
// `airlock shell` exit with the code of the process they ran (128+n when signal n killed it).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/internal/app"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// Environment variables that stand in for the global flags.
const (
	EnvURL     = "AIRLOCK_URL"
	EnvAPIKey  = "AIRLOCK_API_KEY"
	EnvDataDir = "AIRLOCK_DATA_DIR"
	EnvKeyFile = "AIRLOCK_KEY_FILE"
	// EnvPostgres is airlock up's --postgres.
	EnvPostgres = "AIRLOCK_POSTGRES"
	// EnvJoinToken is airlock node join's --token.
	EnvJoinToken = "AIRLOCK_JOIN_TOKEN"
	// EnvMasterKeyFile is airlock up's --master-key-file.
	EnvMasterKeyFile = "AIRLOCK_MASTER_KEY_FILE"
)

// Streams are the standard streams a command uses.
type Streams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// Execute runs the airlock command with the process's arguments and standard streams and reports the
// exit code for os.Exit.
func Execute() int {
	return Run(context.Background(), os.Args[1:], Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
}

// Run runs the airlock command with args (without the program name) and reports its exit code.
func Run(ctx context.Context, args []string, s Streams) int {
	g := &globals{Streams: s}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintf(s.Err, "airlock: %s\n", g.explain(err))
	return 1
}

// exitError ends the command with an exit code and no message (the message, if any, was printed).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// globals holds the global flags and the streams.
type globals struct {
	Streams

	url     string
	apiKey  string
	dataDir string
	keyFile string
	json    bool

	// keyNote says why no API key was found, for the hint on an unauthenticated error.
	keyNote string
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "airlock",
		Short: "Run AI agents' work in secure, disposable gVisor sandboxes",
		Long: `Airlock runs AI agents' work in secure, disposable gVisor sandboxes.

Start the server with "airlock up" (as root), then create sandboxes and run commands in them:

  id=$(airlock sandbox create)
  airlock exec "$id" -- python3 -c 'print(6*7)'
  airlock shell "$id"
  airlock cp ./src "$id":/home/user/src
  airlock sandbox rm "$id"`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			g.resolve(cmd)
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.url, "url", airlock.DefaultBaseURL, "the API's URL (env "+EnvURL+")")
	pf.StringVar(&g.apiKey, "api-key", "", "the API key or access token (env "+EnvAPIKey+"; default: read from --key-file)")
	pf.StringVar(&g.keyFile, "key-file", app.DefaultKeyFile(), "the file holding the API key; airlock up saves the first one there (env "+EnvKeyFile+")")
	pf.StringVar(&g.dataDir, "data-dir", app.DefaultDataDir, "the server's data directory (env "+EnvDataDir+")")
	pf.BoolVar(&g.json, "json", false, "print JSON instead of text")

	root.AddCommand(
		newUpCmd(g),
		newServerCmd(g),
		newSandboxCmd(g),
		newSessionCmd(g),
		newRetentionCmd(g),
		newExecCmd(g),
		newShellCmd(g),
		newCpCmd(g),
		newPortForwardCmd(g), newPortCmd(g),
		newPsCmd(g),
		newConnectionCmd(g),
		newTenantCmd(g),
		newNodeCmd(g),
		newTemplateCmd(g),
		newKeyCmd(g),
		newTokenCmd(g),
		newUsageCmd(g),
		newEncryptionCmd(g),
		newAuditCmd(g),
		newMCPCmd(g),
		newCodeCmd(g),
	)
	return root
}

// resolve fills the global flags that were not given from the environment.
func (g *globals) resolve(cmd *cobra.Command) {
	for _, f := range []struct {
		name, env string
		dst       *string
	}{{"url", EnvURL, &g.url}, {"api-key", EnvAPIKey, &g.apiKey}, {"data-dir", EnvDataDir, &g.dataDir}, {"key-file", EnvKeyFile, &g.keyFile}} {
		if cmd.Flags().Changed(f.name) {
			continue
		}
		if v := os.Getenv(f.env); v != "" {
			*f.dst = v
		}
	}
}

// client returns an API client for the global flags. Without --api-key or AIRLOCK_API_KEY it reads the
// key file (and, for installations from before it existed, the data directory's api-key file).
func (g *globals) client() *airlock.Client {
	key := g.apiKey
	if key == "" {
		for _, path := range []string{g.keyFile, filepath.Join(g.dataDir, app.APIKeyFile)} {
			b, err := os.ReadFile(path)
			if err == nil {
				key = strings.TrimSpace(string(b))
				break
			}
			if g.keyNote == "" {
				if errors.Is(err, os.ErrNotExist) {
					g.keyNote = fmt.Sprintf("no --api-key, no %s, and no %s", EnvAPIKey, path)
				} else {
					g.keyNote = fmt.Sprintf("no --api-key, no %s, and %s is unreadable: %v", EnvAPIKey, path, errors.Unwrap(err))
				}
			}
		}
		if key != "" {
			g.keyNote = ""
		}
	}
	return airlock.New(g.url, airlock.WithAPIKey(key), airlock.WithHTTPClient(&http.Client{}))
}

// explain returns err's message with a hint for the usual setup mistakes.
func (g *globals) explain(err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, airlock.ErrUnauthenticated) && g.keyNote != "":
		msg += " (" + g.keyNote + ")"
	case errors.Is(err, syscall.ECONNREFUSED):
		msg += fmt.Sprintf(" (is `airlock up` running at %s?)", g.url)
	}
	return msg
}
