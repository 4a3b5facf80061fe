package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/api/wire"
)

// networkFlags are the egress flags of create and network.
type networkFlags struct {
	allow    []string
	allowAll bool
	file     string
}

func (n *networkFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringArrayVar(&n.allow, "allow", nil, "allow egress to HOST[:PORTS] or CIDR[:PORTS], e.g. api.openai.com:443, '*.pypi.org:443', 203.0.113.0/24:5432 (repeatable)")
	f.BoolVar(&n.allowAll, "allow-all", false, "allow egress everywhere except private, metadata and host addresses")
	f.StringVar(&n.file, "network", "", "read the whole egress policy from this JSON file (- for stdin)")
}

func (n *networkFlags) set() bool { return len(n.allow) > 0 || n.allowAll || n.file != "" }

// policy builds the policy the flags describe.
func (n *networkFlags) policy() (*wire.NetworkPolicy, error) {
	if n.file != "" {
		if len(n.allow) > 0 || n.allowAll {
			return nil, fmt.Errorf("--network takes the whole policy; do not combine it with --allow or --allow-all")
		}
		var b []byte
		var err error
		if n.file == "-" {
			b, err = io.ReadAll(os.Stdin)
		} else {
			b, err = os.ReadFile(n.file)
		}
		if err != nil {
			return nil, fmt.Errorf("--network: %w", err)
		}
		var p wire.NetworkPolicy
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("--network %s: %w", n.file, err)
		}
		return &p, nil
	}
	p := &wire.NetworkPolicy{}
	if n.allowAll {
		p.Default = "allow"
	}
	for _, a := range n.allow {
		r, err := parseAllow(a)
		if err != nil {
			return nil, err
		}
		p.Rules = append(p.Rules, r)
	}
	return p, nil
}

// parseAllow reads HOST[:PORTS] or CIDR[:PORTS]; PORTS is a comma-separated list of ports and ranges.
func parseAllow(s string) (wire.NetworkRule, error) {
	r := wire.NetworkRule{Action: "allow"}
	target, ports := s, ""
	if i := strings.LastIndex(s, ":"); i >= 0 && !strings.Contains(s[i+1:], "/") {
		target, ports = s[:i], s[i+1:]
	}
	if target == "" {
		return r, fmt.Errorf("--allow %q: want HOST[:PORTS] or CIDR[:PORTS]", s)
	}
	if strings.Contains(target, "/") {
		r.CIDRs = []string{target}
	} else {
		r.Host = target
	}
	if ports != "" {
		for _, p := range strings.Split(ports, ",") {
			if p = strings.TrimSpace(p); p != "" {
				r.Ports = append(r.Ports, wire.PortRange(p))
			}
		}
	}
	return r, nil
}

func newNetworkCmd(g *globals) *cobra.Command {
	var nf networkFlags
	cmd := &cobra.Command{
		Use:   "network SANDBOX",
		Short: "Show a sandbox's egress policy, or replace it with --allow, --allow-all or --network",
		Long: `Show a sandbox's egress policy as JSON, or replace it. A new policy applies to the connections the
sandbox opens from then on, without a restart. With no rules a sandbox reaches nothing.`,
		Example: `  airlock sandbox network sb_…
  airlock sandbox network sb_… --allow api.openai.com:443 --allow '*.pypi.org:443'
  airlock sandbox network sb_… --network policy.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			c := g.client()
			if !nf.set() {
				p, err := c.GetNetwork(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return printJSON(g.Out, p)
			}
			p, err := nf.policy()
			if err != nil {
				return err
			}
			got, err := c.SetNetwork(cmd.Context(), args[0], *p)
			if err != nil {
				return err
			}
			return printJSON(g.Out, got)
		},
	}
	nf.add(cmd)
	return cmd
}
