package cli

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/app"
	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/fsutil"
	"github.com/airlockrun/airlock/internal/keeper"
	"github.com/airlockrun/airlock/internal/nodeapi"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// Files a node keeps in <data dir>/cluster once it joined.
const (
	NodeClusterDir = app.NodeClusterDir
	NodeKeyFile    = app.NodeKeyFile
	NodeCertFile   = app.NodeCertFile
	NodeCAFile     = app.NodeCAFile
	NodeInfoFile   = app.NodeInfoFile
)

// NodeInfo is what NodeInfoFile holds.
type NodeInfo = app.NodeInfo

func newNodeTokenCreateCmd(g *globals) *cobra.Command {
	var req wire.CreateJoinTokenRequest
	var ttl time.Duration
	create := &cobra.Command{
		Use:   "create",
		Short: "Make a join token and print it (shown only once)",
		Long: `Make a join token and print it (shown only once). A token joins each node once, and one node unless
--uses says more; a token for more than one node must name the IDs they may join as (--node-id, repeat)
or what their IDs start with (--node-prefix), so that its holder cannot join as any node it likes.

No token takes the place of a node that joined: its ID is its own. The node itself re-joins from its host
(node join finds its key in the data directory and proves it holds it). To put a node's ID on a new host
(its old host lost with its key), make a token for that ID with --replace: your approval of the new host.

    airlock node token create --ttl 1h                                   (one node)
    airlock node token create --ttl 720h --node-prefix k8s- --uses 50    (a DaemonSet: k8s-<host>)
    airlock node token create --ttl 1h --node-id node-a --replace        (node-a on a new host)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			req.TTLSeconds = int64(ttl / time.Second)
			ct, err := g.client().CreateJoinToken(cmd.Context(), req)
			if done, err := g.jsonOrErr(ct, err); done {
				return err
			}
			id, replace := "<id>", ""
			switch {
			case len(ct.NodeIDs) == 1:
				id = ct.NodeIDs[0]
			case ct.NodePrefix != "":
				id = ct.NodePrefix + "<name>"
			}
			if ct.Replace {
				replace = " --replace"
			}
			fmt.Fprintf(g.Err, "Join token %s, for %s, good until %s, shown only now; nodes join (over the API, --url), then run\n"+
				"(reporting to the cluster port, --control-plane), with the same data directory, as root:\n"+
				"    airlock --data-dir /var/lib/airlock-node node join --url %s --ca-fingerprint %s --token <token> --id %s --host <address>%s\n"+
				"    airlock --data-dir /var/lib/airlock-node node run --control-plane https://<control plane>:<cluster port, 7443>\n",
				ct.ID, tokenScope(ct.JoinToken), ct.ExpiresAt.Local().Format(time.DateTime), g.url, ct.CAFingerprint, id, replace)
			fmt.Fprintln(g.Out, ct.Token)
			return nil
		},
	}
	create.Flags().DurationVar(&ttl, "ttl", 24*time.Hour, "how long nodes may join with it (at most 720h)")
	create.Flags().StringVar(&req.Description, "description", "", "what the token is for")
	create.Flags().StringArrayVar(&req.NodeIDs, "node-id", nil, "an ID a node may join with it as (repeat; default: any ID, for one node)")
	create.Flags().StringVar(&req.NodePrefix, "node-prefix", "", "what the IDs of the nodes that join with it must start with")
	create.Flags().IntVar(&req.Uses, "uses", 0, "how many nodes may join with it (default: one, or one for each --node-id; more than one needs --node-id or --node-prefix)")
	create.Flags().BoolVar(&req.Replace, "replace", false, "let it take the place of the node of its one --node-id, which joined before: approve a new host for it")
	return create
}

func newNodeTokenCmd(g *globals) *cobra.Command {
	token := &cobra.Command{Use: "token", Short: "Manage join tokens (operator tenant's admin key)"}
	token.AddCommand(newNodeTokenCreateCmd(g),
		&cobra.Command{
			Use:     "ls",
			Aliases: []string{"list"},
			Short:   "List the join tokens",
			Args:    cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				defer interruptible(cmd)()
				l, err := g.client().ListJoinTokens(cmd.Context())
				if done, err := g.jsonOrErr(l, err); done {
					return err
				}
				t := newTable(g.Out, "ID", "EXPIRES", "FOR", "JOINED", "DESCRIPTION")
				for _, jt := range l.JoinTokens {
					exp := jt.ExpiresAt.Local().Format(time.DateTime)
					if !time.Now().Before(jt.ExpiresAt) {
						exp += " (expired)"
					}
					joined := fmt.Sprintf("%d/%d", len(jt.Joined), jt.Uses)
					if len(jt.Joined) > 0 {
						joined += " " + strings.Join(jt.Joined, ",")
					}
					t.row(jt.ID, exp, tokenScope(jt), joined, jt.Description)
				}
				return t.flush()
			},
		},
		&cobra.Command{
			Use:     "rm ID",
			Aliases: []string{"revoke"},
			Short:   "Revoke a join token (nodes that joined keep their certificates)",
			Args:    cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				defer interruptible(cmd)()
				return g.client().DeleteJoinToken(cmd.Context(), args[0])
			},
		})
	return token
}

func newNodeJoinCmd(g *globals) *cobra.Command {
	var joinToken, nodeID, caFingerprint string
	var hosts []string
	var replace bool
	join := &cobra.Command{
		Use:   "join",
		Short: "Join this host to a cluster as a node: get its certificate with a join token",
		Long: `Join makes the node's private key here (it never leaves the host), sends a certificate signing request with
the join token to the control plane at --url, and saves the key, the node's certificate and the cluster
CA's certificate in <data dir>/cluster. The token may also come from AIRLOCK_JOIN_TOKEN.

A node that joined before re-joins the same way, from its host: join finds its key and certificate in the
data directory, keeps the key, and proves it holds it; no token is needed (its certificate may have
expired). Another host cannot take a node's ID, with or without a token: only with one the operator made
to replace that node (node token create --node-id ID --replace), and --replace.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			if joinToken == "" {
				joinToken = os.Getenv(EnvJoinToken)
			}
			if nodeID == "" {
				return errors.New("--id is required")
			}
			if err := cluster.CheckID(nodeID); err != nil {
				return fmt.Errorf("--id: %w", err)
			}
			if err := checkJoinURL(g.url); err != nil {
				return err
			}
			dir := filepath.Join(g.dataDir, NodeClusterDir)
			own, ownCert := joinedKey(dir, nodeID)
			if joinToken == "" && own == nil {
				return fmt.Errorf("--token (or %s) is required: %s holds no key of node %s to re-join with", EnvJoinToken, dir, nodeID)
			}
			req := wire.JoinRequest{Token: joinToken, NodeID: nodeID, Hosts: hosts, Replace: replace}
			key := own
			if own != nil {
				// The node itself, joining again: the key stays, and proves whose the ID is.
				csr, err := cluster.NewCSR(own)
				if err != nil {
					return err
				}
				p, err := cluster.SignJoinProof(own, ownCert, nodeID, csr, hosts, time.Now())
				if err != nil {
					return err
				}
				req.CSR, req.Proof = string(csr), &wire.JoinProof{Certificate: string(p.CertPEM), SignedAt: p.SignedAt, Signature: p.Signature}
			} else {
				var csr []byte
				var err error
				if key, csr, err = cluster.NewKey(); err != nil {
					return err
				}
				req.CSR = string(csr)
			}
			res, err := airlock.New(g.url).JoinNode(cmd.Context(), req)
			if err != nil {
				return err
			}
			if err := checkJoined(res, key, caFingerprint, nodeID); err != nil {
				return fmt.Errorf("the control plane's answer is not to be trusted: %w", err)
			}
			keyDER, err := x509.MarshalPKCS8PrivateKey(key)
			if err != nil {
				return err
			}
			keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
			clear(keyDER)
			defer clear(keyPEM)
			info, err := json.MarshalIndent(NodeInfo{ID: nodeID, ControlPlane: strings.TrimSuffix(g.url, "/"), Hosts: hosts, JoinedAt: res.Node.JoinedAt}, "", "  ")
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			for _, f := range []struct {
				name string
				data []byte
			}{{NodeKeyFile, keyPEM}, {NodeCertFile, []byte(res.Certificate)}, {NodeCAFile, []byte(res.CACertificate)}, {NodeInfoFile, append(info, '\n')}} {
				if err := fsutil.WriteFileAtomic(filepath.Join(dir, f.name), f.data, 0o600); err != nil {
					return err
				}
			}
			if g.json {
				return printJSON(g.Out, res.Node)
			}
			how := "joined"
			if own != nil {
				how = "joined again with its key"
			}
			fmt.Fprintf(g.Out, "Node %s %s; its certificate (valid until %s) and key are in %s\n", nodeID, how, res.Node.CertExpiresAt.Local().Format(time.DateTime), dir)
			return nil
		},
	}
	join.Flags().StringVar(&joinToken, "token", "", "the join token (env "+EnvJoinToken+", which keeps it out of the process list); a node that joined before re-joins without one")
	join.Flags().StringVar(&nodeID, "id", "", "the node's ID: 1 to 64 of a-z, 0-9 and -")
	join.Flags().StringArrayVar(&hosts, "host", nil, "a DNS name or IP address control planes reach this node at (repeat)")
	join.Flags().BoolVar(&replace, "replace", false, "take the place of the node of this ID that joined before on another host, with a join token the operator made to replace it")
	join.Flags().StringVar(&caFingerprint, "ca-fingerprint", "", `the cluster CA's fingerprint ("sha256:<hex>", printed by "node token create"): the join is refused if the control plane presents another CA`)
	return join
}

func newNodeRunCmd(g *globals) *cobra.Command {
	var cfg app.NodeConfig
	var host hostFlags
	var pool string
	run := &cobra.Command{
		Use:   "run",
		Short: "Run this host as a node of the cluster it joined (as root)",
		Long: `Run the node in the foreground: it serves the node API to the control planes at --listen (mutual TLS;
only control planes of the cluster are let in), reports in heartbeats to the cluster port at
--control-plane (a load balancer or one replica), and runs the sandboxes the control planes place on it.
Secrets, OAuth tokens and key wraps come from the control plane at the moment a sandbox's request needs
them; nothing of a tenant is stored on the node but its sandboxes (and their encrypted snapshots).

The node writes its sandboxes' snapshots straight into the cluster's blob store and restores them from
it, so give it the control planes' store: --s3-* (the same bucket and prefix) or --blob-dir (the
control plane's DATA/blobs, on this host or a shared file system). The tenants' keys stay with the
control planes, which hand the node a tenant's snapshot keys for as long as it writes or reads one.

SIGINT or SIGTERM stops the node: its sandboxes are destroyed, and their sessions resume elsewhere from
their latest snapshots.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if len(cfg.ControlPlanes) == 0 {
				return errors.New("--control-plane (the cluster port's https URL) is required")
			}
			if cfg.MemoryMB < 0 || cfg.CPUMillicores < 0 || cfg.MaxSandboxes < 0 {
				return errors.New("--memory-mb, --cpu-millicores and --max-sandboxes must not be negative")
			}
			cfg.Logger = host.logger(g)
			var err error
			if cfg.EgressAllowPrivate, err = egressAllowPrivate(host.allowPrivate); err != nil {
				return err
			}
			if pool != "" {
				if cfg.SandboxAddresses, err = netip.ParsePrefix(pool); err != nil {
					return fmt.Errorf("--sandbox-addresses: %w", err)
				}
			}
			if cfg.KeeperBinary, err = os.Executable(); err != nil {
				return fmt.Errorf("find this binary, to run the fence keeper with: %w", err)
			}
			cfg.DataDir, cfg.Out, cfg.Runsc, cfg.Debug, cfg.S3 = g.dataDir, g.Out, host.runsc, host.debug, host.s3Config()
			return app.RunNode(ctx, cfg)
		},
	}
	f := run.Flags()
	f.DurationVar(&cfg.LogRetention, "log-retention", 0, "how long the flow logs of sandboxes whose tenant keeps logs forever are kept on this node (default: forever)")
	f.StringArrayVar(&cfg.ControlPlanes, "control-plane", nil, "the control planes' cluster port, https://host:port: a load balancer's, or each replica's (repeat; tried in turn)")
	f.StringVar(&cfg.Listen, "listen", app.DefaultNodeListen, "the node API's address")
	f.StringVar(&cfg.Advertise, "advertise", "", "the host:port control planes reach the node API at; its host must be one the node joined with (default: the first --host of the join and the --listen port)")
	f.IntVar(&cfg.MaxSandboxes, "max-sandboxes", 0, "the sandboxes this node runs at once (default 32 per CPU core)")
	f.Int64Var(&cfg.MemoryMB, "memory-mb", 0, "the most memory, in MB, this node offers sandboxes: its share of a host other nodes share (default: the host's)")
	f.Int64Var(&cfg.CPUMillicores, "cpu-millicores", 0, "the most CPU (1000 a core, over-committed) this node offers: its share of a shared host (default: the host's)")
	f.StringVar(&pool, "sandbox-addresses", "", "the range inside 100.64.0.0/10 the sandboxes' addresses come from, for nodes sharing a host (default 100.96.0.0/12)")
	f.StringVar(&cfg.BlobDir, "blob-dir", "", "the cluster's blob directory (a control plane's DATA/blobs on this host or a shared file system)")
	host.add(f, " (give each node the control planes' ranges)")
	return run
}

func newNodeKeeperCmd(g *globals) *cobra.Command {
	var cfg keeper.Config
	cmd := &cobra.Command{
		Use:    "keeper",
		Short:  "Run a node's fence keeper (airlock node run starts it)",
		Hidden: true,
		Long: `Run the fence keeper of a node: it stops every process in the cgroups --cgroup names once the lease the
node renews over --socket lapses, also after the node process died. airlock node run starts it and
takes it over when it starts again; there is no need to run it by hand.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// The node's lease on a first start: its own fence and the slack, as it renews it.
			cfg.Lease, cfg.Logger = nodeapi.FenceAfter+app.KeeperSlack, slog.New(slog.NewTextHandler(g.Err, nil))
			return keeper.Run(ctx, cfg)
		},
	}
	cmd.Flags().StringVar(&cfg.Socket, "socket", "", "the unix socket the node renews the lease over")
	cmd.Flags().StringArrayVar(&cfg.Cgroups, "cgroup", nil, "a cgroup parent holding the node's sandboxes' processes (repeat)")
	return cmd
}

func newNodeBoundCmd(g *globals) *cobra.Command {
	var bound wire.NodeCapacity
	cmd := &cobra.Command{
		Use:   "bound ID",
		Short: "Set the most a node is trusted to offer sandboxes (operator tenant's admin key)",
		Long: `Set the most a node is trusted to offer sandboxes. Placement uses the capacity a node reports only up
to its bound, so a node taken over cannot draw in more sandboxes, and their tenants' secrets, than it
was given. Until set, the bound is what the node reported in its first heartbeat after it joined.
A flag left out keeps the current bound's. It applies from the node's next heartbeat.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			n, err := g.client().SetNodeBound(cmd.Context(), args[0], bound)
			if done, err := g.jsonOrErr(n, err); done {
				return err
			}
			fmt.Fprintf(g.Out, "node %s: at most %d sandboxes, %d MB of memory, %d millicores\n", n.ID,
				n.Bound.MaxSandboxes, n.Bound.MemoryMB, n.Bound.CPUMillicores)
			return nil
		},
	}
	cmd.Flags().IntVar(&bound.MaxSandboxes, "max-sandboxes", 0, "the sandboxes it may run at once")
	cmd.Flags().Int64Var(&bound.MemoryMB, "memory-mb", 0, "the memory, in MB, of the sandboxes it may run at once")
	cmd.Flags().Int64Var(&bound.CPUMillicores, "cpu-millicores", 0, "the CPU (1000 a core) it may offer")
	return cmd
}

func newNodeRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID",
		Aliases: []string{"remove"},
		Short:   "Forget a node whose host is gone for good (operator tenant's admin key)",
		Long: `Forget a node whose host is gone for good: its record goes, its certificate is let in no more, and
it is no longer listed. The node must be down: a node that dies is given up 12 s after its last
heartbeat, its sandboxes fail and its sessions resume on other nodes from their latest complete
snapshots; until then this is refused, and so is removing a node that is up (stop it first: on SIGTERM
its sandboxes move). Snapshots it saved but never stored in the snapshot store are failed. To bring
the host back, join it again (airlock node join).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			if err := g.client().RemoveNode(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(g.Out, "node %s removed\n", args[0])
			return nil
		},
	}
}

func newNodeDrainCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "drain ID",
		Short: "Take a node out of placement and move its sessions to other nodes (operator tenant's admin key)",
		Long: `Take a node out of placement before its host goes down for maintenance or for good: no sandbox is
placed on it any more, and each of its running sessions is paused (a snapshot of its memory, processes
and files, stored) and resumed on another node at once, so that nothing of its work is lost; it returns
when they moved. A session no other node has room for stays paused. Sandboxes of no session cannot
move: they run until they end (or are deleted). Then stop the node (SIGTERM) and, if its host is gone
for good, forget it (airlock node rm). airlock node undrain takes it back.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			rep, err := g.client().DrainNode(cmd.Context(), args[0])
			if done, err := g.jsonOrErr(rep, err); done {
				return err
			}
			for _, m := range rep.Moved {
				fmt.Fprintf(g.Out, "moved session %s (tenant %s) to %s\n", m.SessionID, m.TenantID, m.To)
			}
			for _, m := range rep.NotMoved {
				fmt.Fprintf(g.Out, "did not move session %s (tenant %s): %s\n", m.SessionID, m.TenantID, m.Reason)
			}
			if len(rep.Sandboxes) > 0 {
				fmt.Fprintf(g.Out, "%d sandboxes of no session stay until they end: %s\n", len(rep.Sandboxes), strings.Join(rep.Sandboxes, " "))
			}
			fmt.Fprintf(g.Out, "node %s is draining: no sandbox is placed on it (airlock node undrain %s takes it back)\n", rep.Node.ID, rep.Node.ID)
			if len(rep.NotMoved) > 0 {
				return fmt.Errorf("%d sessions not moved", len(rep.NotMoved))
			}
			return nil
		},
	}
}

func newNodeUndrainCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "undrain ID",
		Short: "Let sandboxes be placed on a draining node again (operator tenant's admin key)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			n, err := g.client().UndrainNode(cmd.Context(), args[0])
			if done, err := g.jsonOrErr(n, err); done {
				return err
			}
			fmt.Fprintf(g.Out, "node %s takes sandboxes again (%s)\n", n.ID, n.State)
			return nil
		},
	}
}

func newNodeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Nodes that run as processes of their own: join tokens, joining, the node list",
		Long: `A cluster has control-plane replicas and nodes that run the sandboxes, each its own process, talking over
mutual TLS with certificates the control plane issues from the cluster's CA (kept in the database, sealed
under the master key). A node joins with a join token the operator makes:

    airlock node token create --ttl 24h            (operator's admin key)
    airlock node join --url https://cp.internal --token alj_… --id node-a --host 10.0.0.5

The join writes the node's key, certificate and the cluster CA's to <data dir>/cluster.`,
	}
	cmd.AddCommand(newNodeTokenCmd(g), newNodeJoinCmd(g), newNodeRunCmd(g), newNodeKeeperCmd(g), newNodeBoundCmd(g), newNodeRmCmd(g),
		newNodeDrainCmd(g), newNodeUndrainCmd(g),
		&cobra.Command{
			Use:     "ls",
			Aliases: []string{"list"},
			Short:   "List the nodes that joined (operator tenant's admin key)",
			Args:    cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				defer interruptible(cmd)()
				l, err := g.client().ListNodes(cmd.Context())
				if done, err := g.jsonOrErr(l, err); done {
					return err
				}
				t := newTable(g.Out, "ID", "STATE", "ADDRESS", "SANDBOXES", "MEMORY MB", "HOSTS", "JOINED", "CERT EXPIRES")
				for _, n := range l.Nodes {
					sbs, mem := "-", "-"
					if n.Capacity != nil {
						sbs, mem = fmt.Sprintf("%d/%d", n.Sandboxes, n.Capacity.MaxSandboxes), strconv.FormatInt(n.Capacity.MemoryMB, 10)
					}
					t.row(n.ID, n.State, n.Addr, sbs, mem, strings.Join(n.Hosts, ","), n.JoinedAt.Local().Format(time.DateTime), n.CertExpiresAt.Local().Format(time.DateTime))
				}
				if err := t.flush(); err != nil {
					return err
				}
				warned := map[string]bool{}
				for _, n := range l.Nodes {
					for _, w := range n.Warnings {
						if !warned[w] {
							warned[w] = true
							fmt.Fprintf(g.Err, "warning: %s\n", w)
						}
					}
				}
				return nil
			},
		})
	return cmd
}

// tokenScope says which nodes a join token is for.
func tokenScope(t wire.JoinToken) string {
	var out string
	switch {
	case len(t.NodeIDs) > 0:
		out = strings.Join(t.NodeIDs, ",")
	case t.NodePrefix != "":
		out = t.NodePrefix + "*"
	default:
		out = "any ID"
	}
	if t.Uses == 1 {
		out = "one node: " + out
	} else {
		out = fmt.Sprintf("%d nodes: %s", t.Uses, out)
	}
	if t.Replace {
		out += " (replaces)"
	}
	return out
}

// joinedKey returns the key and certificate (PEM) of node nodeID that a join left in dir, if there are
// ones that belong together (the certificate may have expired); nil if not.
func joinedKey(dir, nodeID string) (*ecdsa.PrivateKey, []byte) {
	b, err := os.ReadFile(filepath.Join(dir, NodeInfoFile))
	if err != nil {
		return nil, nil
	}
	var info NodeInfo
	if json.Unmarshal(b, &info) != nil || info.ID != nodeID {
		return nil, nil
	}
	certPEM, err := os.ReadFile(filepath.Join(dir, NodeCertFile))
	if err != nil {
		return nil, nil
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, NodeKeyFile))
	if err != nil {
		return nil, nil
	}
	defer clear(keyPEM)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil
	}
	if id, err := cluster.IdentityOf(pair.Leaf); err != nil || id != (cluster.Identity{Role: cluster.RoleNode, ID: nodeID}) {
		return nil, nil
	}
	return key, certPEM
}

// checkJoinURL refuses to send a join token in the clear off this host: https, or http to loopback.
func checkJoinURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("--url: %w", err)
	}
	switch {
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http":
		if ip := net.ParseIP(u.Hostname()); (ip != nil && ip.IsLoopback()) || u.Hostname() == "localhost" {
			return nil
		}
	}
	return fmt.Errorf("--url %s: a join token goes only over https (or http to this host's loopback)", raw)
}

// checkJoined checks what the control plane answered a join with: the CA is the pinned one (if one is),
// and the certificate is from that CA, names the node, and is for the key made here.
func checkJoined(res *wire.JoinResponse, key *ecdsa.PrivateKey, pin, nodeID string) error {
	caBlock, _ := pem.Decode([]byte(res.CACertificate))
	if caBlock == nil {
		return errors.New("no CA certificate")
	}
	ca, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		return err
	}
	if fp := cluster.CertFingerprint(caBlock.Bytes); pin != "" && !strings.EqualFold(fp, pin) {
		return fmt.Errorf("the cluster CA is %s, not the %s given", fp, pin)
	}
	block, _ := pem.Decode([]byte(res.Certificate))
	if block == nil {
		return errors.New("no certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return err
	}
	if id, err := cluster.IdentityOf(cert); err != nil || id != (cluster.Identity{Role: cluster.RoleNode, ID: nodeID}) {
		return fmt.Errorf("the certificate names %v, not node %s", id, nodeID)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return errors.New("the certificate is not for this node's key")
	}
	return nil
}
