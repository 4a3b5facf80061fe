package cli

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/internal/app"
	"github.com/airlockrun/airlock/internal/retention"
)

func newUpCmd(g *globals) *cobra.Command {
	var listen, runsc, publicURL string
	var debug bool
	var keepAll, keepHourly, keepDaily, pruneEvery, gcEvery, gcGrace time.Duration
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the Airlock server: the API, the control plane and a local node",
		Long: `Run the Airlock server in the foreground: the API, the control plane and a local node, with all state
in the data directory. It must run as root. On the first start it creates the default tenant and prints
its API key, which it also saves to <data-dir>/api-key (mode 0600) for the CLI.

SIGINT or SIGTERM shuts it down cleanly: every sandbox is stopped and removed from the host.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts := &slog.HandlerOptions{Level: slog.LevelInfo}
			if debug {
				opts.Level = slog.LevelDebug
			}
			var h slog.Handler = slog.NewTextHandler(g.Err, opts)
			if g.json {
				h = slog.NewJSONHandler(g.Err, opts)
			}
			return app.Run(ctx, app.Config{
				DataDir: g.dataDir,
				Listen:  listen,
				Runsc:   runsc,
				Debug:   debug,
				Logger:  slog.New(h),
				Out:     g.Out,

				PublicURL:     publicURL,
				Retention:     retention.Policy{KeepAll: keepAll, KeepHourly: keepHourly, KeepDaily: keepDaily},
				PruneInterval: pruneEvery, GCInterval: gcEvery, GCGrace: gcGrace,
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", app.DefaultListen, "the API's address; keep it on loopback unless a TLS proxy fronts it")
	f.StringVar(&publicURL, "public-url", "", "the URL under which browsers reach this API, for OAuth sign-in callbacks (default: http://<listen address>)")
	f.StringVar(&runsc, "runsc", "", "the runsc binary (default: runsc from PATH)")
	f.BoolVar(&debug, "debug", false, "log at debug level and keep runsc debug logs in each sandbox's directory")
	f.DurationVar(&keepAll, "keep-all", 0, "default retention: keep every snapshot younger than this (default 1h)")
	f.DurationVar(&keepHourly, "keep-hourly", 0, "then the newest snapshot of each hour, younger than this (default 24h)")
	f.DurationVar(&keepDaily, "keep-daily", 0, "then the newest snapshot of each day, younger than this (default 168h)")
	f.DurationVar(&pruneEvery, "prune-interval", 0, "how often retention is applied (default 5m)")
	f.DurationVar(&gcEvery, "gc-interval", 0, "how often unreferenced snapshot data is collected (default 10m)")
	f.DurationVar(&gcGrace, "gc-grace", 0, "how old unreferenced snapshot data must be to be collected (default 1h)")
	return cmd
}
