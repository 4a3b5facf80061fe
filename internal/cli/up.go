package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlockrun/airlock/internal/app"
	blobs3 "github.com/airlockrun/airlock/internal/blob/s3"
	"github.com/airlockrun/airlock/internal/fsutil"
)

// DefaultClusterListen is airlock server's default cluster port.
const DefaultClusterListen = ":7443"

func newUpCmd(g *globals) *cobra.Command { return newServeCmd(g, false) }

// newServerCmd is airlock server: a control-plane replica without a node of its own.
func newServerCmd(g *globals) *cobra.Command { return newServeCmd(g, true) }

// newServeCmd is airlock up (the API, the control plane and a local node) or, with server, airlock
// server (the API and the control plane, for nodes in processes of their own).
func newServeCmd(g *globals, server bool) *cobra.Command {
	cfg := app.Config{NoLocalNode: server}
	var host hostFlags
	var pinFile string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the Airlock server: the API, the control plane and a local node",
		Long: `Run the Airlock server in the foreground: the API, the control plane and a local node, with all state
in the data directory. It must run as root. On the first start it creates the operator tenant and saves
its first API key to --key-file (default ~/.config/airlock/api-key, mode 0600), where the CLI finds it;
at a terminal it also prints the key. The data directory holds no credential in the clear.

SIGINT or SIGTERM shuts it down cleanly: every sandbox is stopped and removed from the host.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if server && cfg.ClusterListen == "" {
				return errors.New("--cluster-listen: the nodes need a cluster port")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := readPKCS11PIN(&cfg.PKCS11, pinFile); err != nil {
				return err
			}
			if cfg.PostgresDSN == "" {
				cfg.PostgresDSN = os.Getenv(EnvPostgres)
			}
			if cfg.MasterKeyFile == "" {
				cfg.MasterKeyFile = os.Getenv(EnvMasterKeyFile)
			}
			var err error
			if cfg.EgressAllowPrivate, err = egressAllowPrivate(host.allowPrivate); err != nil {
				return err
			}
			cfg.DataDir, cfg.KeyFile, cfg.Out, cfg.Logger = g.dataDir, g.keyFile, g.Out, host.logger(g)
			cfg.ShowKey = isTerminal(int(os.Stdout.Fd())) && g.Out == os.Stdout
			cfg.Runsc, cfg.Debug, cfg.S3 = host.runsc, host.debug, host.s3Config()
			return app.Run(ctx, cfg)
		},
	}
	f := cmd.Flags()
	if server {
		cmd.Use = "server"
		cmd.Short = "Run a control-plane replica: the API and the cluster port, for nodes in processes of their own"
		cmd.Long = `Run a control-plane replica in the foreground: the API, and the cluster port that nodes which joined
(airlock node join, then airlock node run) report to and are called from. No sandbox runs in this
process: each runs on a node, placed by capacity and by where its session's snapshot is. Replicas keep
no state of their own: give each the same --postgres, --s3-* and --master-key-file, and put any load
balancer in front of their APIs and of their cluster ports.

SIGINT or SIGTERM stops the replica; the nodes and their sandboxes run on.`
		f.StringVar(&cfg.ClusterListen, "cluster-listen", DefaultClusterListen, "the cluster port: nodes that joined call it and are called from here (mutual TLS with the cluster's certificates)")
	} else {
		f.StringVar(&cfg.ClusterListen, "cluster-listen", "", "serve nodes that joined on this address (mutual TLS with the cluster's certificates), e.g. :7443; default: no cluster port")
	}
	host.add(f, "")
	pkcs11Flags(f, &cfg.PKCS11, &pinFile)
	serveFlags(f, &cfg)
	return cmd
}

// serveFlags adds to f the flags of airlock up and server that set cfg: the API's, the state's, the
// keys' checks, snapshot retention and upkeep, and the node's templates.
func serveFlags(f *pflag.FlagSet, cfg *app.Config) {
	f.StringVar(&cfg.Listen, "listen", app.DefaultListen, "the API's address; keep it on loopback unless a TLS proxy fronts it")
	f.StringVar(&cfg.PublicURL, "public-url", "", "the URL under which browsers reach this API, for OAuth sign-in callbacks (default: http://<listen address>)")
	f.StringVar(&cfg.IngressDomain, "ingress-domain", app.DefaultIngressDomain, "sandbox ports are also reached at http://<port>-<sandbox id>.<this domain>:<API port>/ (a wildcard DNS name that leads to the API; \"\" turns it off)")
	f.IntVar(&cfg.IngressMaxConns, "ingress-max-conns", 0, "requests and tunnels in progress to one sandbox's ports; more are refused with 429 (default 1024)")
	f.StringVar(&cfg.PostgresDSN, "postgres", "", "keep the state in this PostgreSQL database (a libpq connection string or postgres:// URL; env "+EnvPostgres+", which keeps a password out of the process list) instead of SQLite in the data directory")
	f.StringVar(&cfg.MasterKeyFile, "master-key-file", "", "the master key, which encrypts the keyring in the database: 64 hex digits, mode 0600, made if missing; every server on one database needs the same (env "+EnvMasterKeyFile+"; default <data dir>/keys/master.key)")
	f.DurationVar(&cfg.KeyCheckInterval, "key-check-interval", 0, "how often tenants' keys are checked; a tenant whose key is revoked or unreachable has its sandboxes stopped (default 15s, at most 1m)")
	f.DurationVar(&cfg.Retention.KeepAll, "keep-all", 0, "default retention: keep every snapshot younger than this (default 1h)")
	f.DurationVar(&cfg.Retention.KeepHourly, "keep-hourly", 0, "then the newest snapshot of each hour, younger than this (default 24h)")
	f.DurationVar(&cfg.Retention.KeepDaily, "keep-daily", 0, "then the newest snapshot of each day, younger than this (default 168h)")
	f.DurationVar(&cfg.PruneInterval, "prune-interval", 0, "how often retention is applied (default 5m)")
	f.DurationVar(&cfg.LogRetention, "log-retention", 0, "how long a tenant's audit and flow logs are kept unless it sets its own (default: forever)")
	f.DurationVar(&cfg.MinLogRetention, "min-log-retention", 0, "the shortest log retention a tenant may set (default: none)")
	f.DurationVar(&cfg.GCInterval, "gc-interval", 0, "how often unreferenced snapshot data and template images are collected (default 10m)")
	f.DurationVar(&cfg.GCGrace, "gc-grace", 0, "how old unreferenced snapshot data must be to be collected (default 1h)")
	f.DurationVar(&cfg.ImageGCGrace, "image-gc-grace", 0, "how long a template image nothing uses stays on the node (default 1h)")
	f.IntVar(&cfg.WarmPool, "warm-pool", 0, "sandboxes kept restored ahead for each kind of create of a template's start snapshot, so that a create only wakes one (default 1; -1: none)")
	f.StringVar(&cfg.DefaultImage, "default-image", "", "the OCI archive the default template is installed from at start when it changed (default: ../lib/airlock/"+app.DefaultImageName+" beside this executable, which scripts/install.sh builds); none: the host's /usr")
}

// pkcs11Flags adds to f the flags of the pkcs11 key provider, which set p and pinFile.
func pkcs11Flags(f *pflag.FlagSet, p *app.PKCS11Config, pinFile *string) {
	f.StringVar(&p.Module, "pkcs11-module", "", "the PKCS#11 module (.so) of an HSM or KMS that keeps customers' keys, for tenants created with --key-provider pkcs11")
	f.StringVar(&p.TokenLabel, "pkcs11-token", "", "the label of the PKCS#11 token to use")
	f.StringVar(pinFile, "pkcs11-pin-file", "", "a file holding the token's user PIN")
	f.StringVar(&p.Helper, "pkcs11-helper", "", "the airlock-pkcs11 helper (default: next to airlock, or on PATH)")
	f.StringArrayVar(&p.Env, "pkcs11-env", nil, "NAME=VALUE for the module's environment (repeat), e.g. SOFTHSM2_CONF=/etc/softhsm/softhsm2.conf")
}

// readPKCS11PIN reads the token's PIN from pinFile into p, which a pkcs11 module needs, with a token.
func readPKCS11PIN(p *app.PKCS11Config, pinFile string) error {
	if p.Module == "" {
		return nil
	}
	if p.TokenLabel == "" || pinFile == "" {
		return errors.New("--pkcs11-module needs --pkcs11-token and --pkcs11-pin-file")
	}
	b, err := fsutil.ReadFileLimit(pinFile, 1<<10)
	if err != nil {
		return fmt.Errorf("--pkcs11-pin-file: %w", err)
	}
	p.PIN = strings.TrimRight(string(b), "\r\n")
	clear(b)
	return nil
}

// hostFlags are the flags airlock up, server and node run share: the runtime's, the log's, the egress
// guard's and the snapshot store's.
type hostFlags struct {
	runsc        string
	debug        bool
	allowPrivate []string
	s3           blobs3.Config
}

// add adds the flags to f; allowPrivateNote ends the help of --egress-allow-private.
func (h *hostFlags) add(f *pflag.FlagSet, allowPrivateNote string) {
	f.StringVar(&h.runsc, "runsc", "", "the runsc binary (default: runsc from PATH)")
	f.BoolVar(&h.debug, "debug", false, "log at debug level and keep runsc debug logs in each sandbox's directory")
	f.StringArrayVar(&h.allowPrivate, "egress-allow-private", nil, egressAllowPrivateHelp+allowPrivateNote)
	s3Flags(f, &h.s3)
}

// logger logs to stderr, as text or (--json) JSON, at debug level with --debug.
func (h *hostFlags) logger(g *globals) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if h.debug {
		opts.Level = slog.LevelDebug
	}
	if g.json {
		return slog.New(slog.NewJSONHandler(g.Err, opts))
	}
	return slog.New(slog.NewTextHandler(g.Err, opts))
}

// s3Config is the S3 blob store the flags name (nil: none), with the credentials from the environment
// only, as AWS tools take them.
func (h *hostFlags) s3Config() *blobs3.Config {
	if h.s3.Endpoint == "" && h.s3.Bucket == "" {
		return nil
	}
	c := h.s3
	c.AccessKey, c.SecretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	return &c
}

// EnvEgressAllowPrivate holds more guarded ranges for --egress-allow-private, comma-separated.
const EnvEgressAllowPrivate = "AIRLOCK_EGRESS_ALLOW_PRIVATE"

const egressAllowPrivateHelp = "a guarded range (private, link-local, loopback, CGNAT, cloud metadata, this host's addresses) that tenants' network rules may then open, as a CIDR, e.g. 10.20.0.0/16 (repeat; env " + EnvEgressAllowPrivate + ", comma-separated). Without it no tenant rule reaches a guarded range"

// egressAllowPrivate parses the --egress-allow-private flags and the environment's ranges.
func egressAllowPrivate(flags []string) ([]netip.Prefix, error) {
	all := append([]string{}, flags...)
	if env := os.Getenv(EnvEgressAllowPrivate); env != "" {
		all = append(all, strings.Split(env, ",")...)
	}
	var out []netip.Prefix
	for _, s := range all {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("--egress-allow-private %q: want a CIDR such as 10.20.0.0/16", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// s3Flags adds the flags of an S3 blob store to f.
func s3Flags(f *pflag.FlagSet, c *blobs3.Config) {
	f.StringVar(&c.Endpoint, "s3-endpoint", "", "keep snapshots in S3 or an S3-compatible service at this host[:port] instead of the data directory (credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
	f.StringVar(&c.Bucket, "s3-bucket", "", "the bucket (it must exist)")
	f.StringVar(&c.Prefix, "s3-prefix", "", "a key prefix in the bucket, ending in /")
	f.StringVar(&c.Region, "s3-region", "", "the bucket's region (default: asked from the service)")
	f.BoolVar(&c.Insecure, "s3-insecure", false, "plain HTTP to the service (loopback or a private network only)")
}
