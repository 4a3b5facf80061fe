package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/api/wire"
)

// portMapping is one [LOCAL:]REMOTE argument of port-forward: Local 0 picks a free port.
type portMapping struct {
	Local  int
	Remote int
}

// parsePortMapping reads [LOCAL:]REMOTE as kubectl port-forward does: "8080" is 8080:8080, ":8080" and
// "0:8080" take a free local port, "9000:8080" is explicit.
func parsePortMapping(s string) (portMapping, error) {
	local, remote, explicit := strings.Cut(s, ":")
	if !explicit {
		remote = s
	}
	var m portMapping
	var err error
	if m.Remote, err = parsePort(remote); err != nil || m.Remote == 0 {
		if !explicit {
			return m, fmt.Errorf("port %q: want [LOCAL:]REMOTE with REMOTE in 1..65535", s)
		}
		return m, fmt.Errorf("port %q: remote port %q is not in 1..65535", s, remote)
	}
	if !explicit {
		m.Local = m.Remote
		return m, nil
	}
	if local == "" {
		return m, nil
	}
	if m.Local, err = parsePort(local); err != nil {
		return m, fmt.Errorf("port %q: local port %q is not in 0..65535", s, local)
	}
	return m, nil
}

// parsePortMappings parses port-forward's mappings and refuses a local port given twice.
func parsePortMappings(args []string) ([]portMapping, error) {
	ms := make([]portMapping, 0, len(args))
	seen := map[int]bool{}
	for _, a := range args {
		m, err := parsePortMapping(a)
		if err != nil {
			return nil, err
		}
		if m.Local != 0 && seen[m.Local] {
			return nil, fmt.Errorf("local port %d is given twice", m.Local)
		}
		seen[m.Local] = true
		ms = append(ms, m)
	}
	return ms, nil
}

// parsePort reads a port number in 0..65535: decimal digits only (no sign, no spaces).
func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("port %q: not a number in 0..65535", s)
	}
	n, _ := strconv.Atoi(s)
	if n > 65535 {
		return 0, fmt.Errorf("port %q: not a number in 0..65535", s)
	}
	return n, nil
}

// parseRemotePorts reads PORT arguments of port public and private: numbers in 1..65535.
func parseRemotePorts(args []string) ([]int, error) {
	ports := make([]int, 0, len(args))
	for _, a := range args {
		p, err := parsePort(a)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("port %q: want a number in 1..65535", a)
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// portListener is a local listener whose connections go to Remote in the sandbox.
type portListener struct {
	net.Listener
	Remote int
}

// listenPorts opens a listener on address for each mapping. On an error it closes the ones it opened.
func listenPorts(address string, ms []portMapping) ([]portListener, error) {
	var ls []portListener
	for _, m := range ms {
		ln, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(m.Local)))
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, err
		}
		ls = append(ls, portListener{Listener: ln, Remote: m.Remote})
	}
	return ls, nil
}

// portForwarder carries the connections accepted on local listeners to ports of a sandbox, each over
// a tunnel of its own. Both of its fields are hooks; Tunnel must be set.
type portForwarder struct {
	// Tunnel opens a connection to port of the sandbox; ctx bounds the opening, not the connection.
	Tunnel func(ctx context.Context, port int) (net.Conn, error)
	// OnError, if set, is told of a local connection that could not be forwarded (its tunnel failed;
	// the connection has been closed) or of a failed accept (retried after a pause). It may be called
	// from several goroutines at once.
	OnError func(l portListener, err error)
}

// Serve forwards the connections accepted on ls until ctx ends; then it closes the listeners and every
// connection it opened or accepted, and returns once all its goroutines have ended. A connection is
// carried until either side ends it, then both are closed. Serve owns ls: it closes them.
func (f *portForwarder) Serve(ctx context.Context, ls []portListener) {
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.serve(ctx, l, &wg)
		}()
	}
	<-ctx.Done()
	for _, l := range ls {
		l.Close()
	}
	wg.Wait()
}

// serve accepts the connections of l until l is closed; each is handled in a goroutine that wg counts.
func (f *portForwarder) serve(ctx context.Context, l portListener, wg *sync.WaitGroup) {
	var pause time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			// Out of file descriptors and the like: wait a little, as net/http does.
			f.report(l, err)
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			continue
		}
		pause = 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.handle(ctx, l, c)
		}()
	}
}

// handle opens a tunnel for the local connection c and copies both ways until either side ends or
// ctx does; it closes both.
func (f *portForwarder) handle(ctx context.Context, l portListener, c net.Conn) {
	defer c.Close()
	remote, err := f.Tunnel(ctx, l.Remote)
	if err != nil {
		if ctx.Err() == nil {
			f.report(l, err)
		}
		return
	}
	defer remote.Close()
	stop := context.AfterFunc(ctx, func() {
		c.Close()
		remote.Close()
	})
	defer stop()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(remote, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, remote); done <- struct{}{} }()
	<-done
	// Either side ended: end both, which ends the other copy.
	c.Close()
	remote.Close()
	<-done
}

func (f *portForwarder) report(l portListener, err error) {
	if f.OnError != nil {
		f.OnError(l, err)
	}
}

// localPort is the port l listens on.
func localPort(l net.Listener) int {
	if a, ok := l.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// forwardList describes port-forward's listeners, for --json.
type forwardList struct {
	Forwards []forward `json:"forwards"`
}

type forward struct {
	// Address is the local address, port included.
	Address    string `json:"address"`
	LocalPort  int    `json:"local_port"`
	RemotePort int    `json:"remote_port"`
}

func newPortForwardCmd(g *globals) *cobra.Command {
	var address string
	cmd := &cobra.Command{
		Use:   "port-forward SANDBOX-OR-SESSION-ID [LOCAL:]REMOTE...",
		Short: "Forward local TCP ports to ports of a sandbox or session",
		Long: `Forward local TCP ports to ports of a sandbox or session, as kubectl port-forward does. Each
[LOCAL:]REMOTE listens on --address, port LOCAL, and carries every connection made to it to port REMOTE
in the sandbox through the API, over a tunnel of its own: 8080 is 8080:8080, and :8080 (or 0:8080) takes
a free local port. It prints "Forwarding from ADDRESS:LOCAL -> REMOTE" for each (with --json, the
listeners as JSON), then runs until SIGINT or SIGTERM.

A connection whose tunnel fails (nothing listens on the port, the sandbox is gone, …) is closed and
reported on stderr; the others go on. The server in the sandbox must listen on 0.0.0.0 (or ::), not on
loopback only. A paused session that resumes automatically is resumed by the first connection.`,
		Example: `  airlock port-forward sb_… 8080
  airlock port-forward sb_… 9000:8080 :5432
  airlock port-forward --address 0.0.0.0 se_… 3000`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return errors.New("want a sandbox or session and at least one port: airlock port-forward ID [LOCAL:]REMOTE...")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			id := args[0]
			ms, err := parsePortMappings(args[1:])
			if err != nil {
				return err
			}
			ls, err := listenPorts(address, ms)
			if err != nil {
				return err
			}
			if g.json {
				out := forwardList{Forwards: make([]forward, len(ls))}
				for i, l := range ls {
					out.Forwards[i] = forward{Address: l.Addr().String(), LocalPort: localPort(l), RemotePort: l.Remote}
				}
				if err := printJSON(g.Out, out); err != nil {
					for _, l := range ls {
						l.Close()
					}
					return err
				}
			} else {
				for _, l := range ls {
					fmt.Fprintf(g.Out, "Forwarding from %s -> %d\n", l.Addr(), l.Remote)
				}
			}
			c := g.client()
			var mu sync.Mutex // serializes the reports on g.Err
			f := &portForwarder{
				Tunnel: func(ctx context.Context, port int) (net.Conn, error) { return c.Tunnel(ctx, id, port) },
				OnError: func(l portListener, err error) {
					mu.Lock()
					defer mu.Unlock()
					fmt.Fprintf(g.Err, "airlock: handling connection for %d: %s\n", localPort(l), g.explain(err))
				},
			}
			f.Serve(cmd.Context(), ls)
			return nil
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1", "the local address to listen on (0.0.0.0 lets other hosts connect)")
	return cmd
}

func newPortCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "port",
		Short: "List a sandbox's ports, make URLs for them, make them public or private",
		Long: `Servers in a sandbox (or a session's sandbox) are reached through the API, at

  <API URL>/v1/sandboxes/ID/ports/PORT/           (/v1/sessions/ID/… for a session)
  http://PORT-ID.<ingress domain>:<API port>/     (for browsers; "_" in ID becomes "-")

with an API key (write scope), or an access token with scope ports, in the Authorization header; or with
no credential for a public port. The server must listen on 0.0.0.0 (or ::), not on loopback only.
"airlock port url" makes a URL that carries its own credential, to open in a browser; "airlock
port-forward" reaches any TCP port from here.`,
	}
	cmd.AddCommand(newPortLsCmd(g), newPortURLCmd(g),
		newPortPublicCmd(g, "public", true, "Let anyone reach ports of a sandbox through the API, without a credential"),
		newPortPublicCmd(g, "private", false, "Make public ports of a sandbox need a credential again"))
	return cmd
}

func newPortLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "ls SANDBOX-OR-SESSION-ID",
		Aliases: []string{"list"},
		Short:   "List the TCP ports processes in a sandbox listen on",
		Long: `List the TCP ports processes in a sandbox (or a session's sandbox) listen on, with their path-form
URL. REACHABLE is no for a server bound to loopback only, which Airlock cannot reach: make it listen on
0.0.0.0 (or ::). PUBLIC ports need no credential (see airlock port public).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			l, err := g.client().ListPorts(cmd.Context(), args[0])
			if done, err := g.jsonOrErr(l, err); done {
				return err
			}
			yesNo := func(b bool) string {
				if b {
					return "yes"
				}
				return "no"
			}
			t := newTable(g.Out, "PORT", "ADDRESS", "REACHABLE", "PUBLIC", "URL")
			for _, p := range l.Ports {
				u := ""
				if p.URLs != nil {
					u = p.URLs.Path
				}
				t.row(strconv.Itoa(p.Port), p.Address, yesNo(p.Reachable), yesNo(p.Public), u)
			}
			return t.flush()
		},
	}
}

func newPortURLCmd(g *globals) *cobra.Command {
	var (
		ttl  time.Duration
		name string
	)
	cmd := &cobra.Command{
		Use:   "url SANDBOX-OR-SESSION-ID PORT",
		Short: "Make a URL for a port that carries its own credential, for a browser",
		Long: `Make an access token that reaches one port of a sandbox or session (scope ports, that port only) and
print the URL that opens it: the host form (a browser origin of its own; only when the server has an
ingress domain), then the path form. With --json, print the whole token.

The URL carries the token: whoever has it reaches the port until the token expires (--ttl) or is revoked
with "airlock token revoke ID". Treat it as a password.`,
		Example: `  airlock port url sb_… 8080
  airlock port url se_… 3000 --ttl 8h --name review`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			id := args[0]
			ports, err := parseRemotePorts(args[1:])
			if err != nil {
				return err
			}
			if ttl < time.Second {
				return fmt.Errorf("--ttl %s: want at least 1s", ttl)
			}
			req := wire.CreateAccessTokenRequest{Name: name, Scopes: []string{wire.TokenScopePorts},
				TTLSeconds: int64(ttl / time.Second), Port: ports[0]}
			if err := setTokenTarget(&req, id); err != nil {
				return err
			}
			tok, err := g.client().CreateAccessToken(cmd.Context(), req)
			if done, err := g.jsonOrErr(tok, err); done {
				return err
			}
			if tok.URLs == nil || tok.URLs.Path == "" {
				return fmt.Errorf("the server made access token %s but gave no URL for port %d (is it older than this airlock?)", tok.ID, req.Port)
			}
			fmt.Fprintf(g.Err, "Made access token %s for port %d of %s, valid until %s (airlock token revoke %s ends it sooner):\n",
				tok.ID, req.Port, id, tok.ExpiresAt.Local().Format(time.DateTime), tok.ID)
			if tok.URLs.Host != "" {
				fmt.Fprintln(g.Out, tok.URLs.Host)
			}
			fmt.Fprintln(g.Out, tok.URLs.Path)
			return nil
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the URL works (at most 168h)")
	cmd.Flags().StringVar(&name, "name", "", "a label for the access token")
	return cmd
}

func newPortPublicCmd(g *globals, use string, public bool, short string) *cobra.Command {
	long := `Make ports of a sandbox public: anyone who can reach the API reaches them, with no credential.`
	if !public {
		long = `Make public ports of a sandbox private again: they need an API key (write scope) or an access
token with scope ports.`
	}
	return &cobra.Command{
		Use:   use + " SANDBOX PORT...",
		Short: short,
		Long: long + `

The ports are the public_ports of the sandbox's network policy; the rest of the policy stays as it is.
Prints the sandbox's public ports. A session ID stands for the session's current sandbox, and the
session keeps the policy when it pauses and resumes.`,
		Example: fmt.Sprintf(`  airlock port %s sb_… 8080 3000`, use),
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			ports, err := parseRemotePorts(args[1:])
			if err != nil {
				return err
			}
			c := g.client()
			id := args[0]
			if strings.HasPrefix(id, "se_") {
				se, err := c.GetSession(cmd.Context(), id)
				if err != nil {
					return err
				}
				if se.SandboxID == "" {
					return fmt.Errorf("session %s is %s and has no sandbox: resume it first", id, se.State)
				}
				id = se.SandboxID
			}
			p, err := c.GetNetwork(cmd.Context(), id)
			if err != nil {
				return err
			}
			next := setPorts(p.PublicPorts, ports, public)
			if !slices.Equal(next, p.PublicPorts) {
				p.PublicPorts = next
				if p, err = c.SetNetwork(cmd.Context(), id, *p); err != nil {
					return err
				}
			}
			if g.json {
				return printJSON(g.Out, p)
			}
			list := "none"
			if len(p.PublicPorts) > 0 {
				s := make([]string, len(p.PublicPorts))
				for i, n := range p.PublicPorts {
					s[i] = strconv.Itoa(n)
				}
				list = strings.Join(s, " ")
			}
			fmt.Fprintf(g.Out, "Public ports of %s: %s\n", id, list)
			return nil
		},
	}
}

// setPorts returns have with ports added (add) or removed, sorted and without duplicates; have is left
// alone.
func setPorts(have, ports []int, add bool) []int {
	out := slices.Clone(have)
	if add {
		out = append(out, ports...)
	} else {
		out = slices.DeleteFunc(out, func(p int) bool { return slices.Contains(ports, p) })
	}
	slices.Sort(out)
	return slices.Compact(out)
}
