package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/internal/daemon"
	"github.com/airlockrun/airlock/internal/mcpserver"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

func newMCPCmd(g *globals) *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve Airlock's tools to an AI agent over MCP (stdio, or streamable HTTP with --listen)",
		Long: `An MCP server whose tools create, list and delete sandboxes and sessions, run commands, read and
write files, pause, resume and fork sessions, snapshot, restore and diff them, and hand out port URLs.

Over stdio (the default) every tool call uses this command's credential (--api-key, AIRLOCK_API_KEY or the
key file): an API key reaches what its tenant and scope allow, an access token only its sandbox or session.
With --listen it serves streamable HTTP at /mcp instead, and each request must carry its own credential
as Authorization: Bearer <API key or access token>; the command's own is never used there.`,
		Example: `  claude mcp add airlock -- airlock mcp
  AIRLOCK_API_KEY=$(airlock token create se_… --scope exec --scope files) airlock mcp
  airlock mcp --listen 127.0.0.1:7071`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			if listen == "" {
				in, _ := g.In.(io.ReadCloser)
				if in == nil {
					in = io.NopCloser(g.In)
				}
				return mcpserver.New(g.client(), daemon.Version).Run(cmd.Context(), &mcp.IOTransport{Reader: in, Writer: nopWriteCloser{g.Out}})
			}
			return serveMCP(cmd.Context(), g, listen)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "serve streamable HTTP at this address's /mcp instead of stdio")
	return cmd
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// serveMCP serves streamable HTTP at addr until ctx ends: each request is served by a server bound to
// its own bearer credential.
func serveMCP(ctx context.Context, g *globals, addr string) error {
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		cred, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		return mcpserver.New(airlock.New(g.url, airlock.WithAPIKey(strings.TrimSpace(cred)), airlock.WithHTTPClient(&http.Client{})), daemon.Version)
	}, &mcp.StreamableHTTPOptions{Stateless: true})
	mux := http.NewServeMux()
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cred, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); !ok || strings.TrimSpace(cred) == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
			http.Error(w, "send an Airlock API key or access token as Authorization: Bearer <credential>", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(g.Err, "airlock mcp: serving streamable HTTP at http://%s/mcp (for %s)\n", ln.Addr(), g.url)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
