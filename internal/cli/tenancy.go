package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/api/wire"
)

func newTenantCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenant",
		Short: "Manage tenants (with an admin key of the operator tenant)",
		Long: `Tenants are the boundary for everything: API keys, sandboxes, sessions, secrets and snapshots belong
to one, and nothing crosses from one to another. The first tenant, made by "airlock up", is the operator
tenant: its admin keys manage the others.`,
	}
	var keyProvider string
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a tenant and print its first admin key (shown only once)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			ct, err := g.client().CreateTenantWith(cmd.Context(), wire.CreateTenantRequest{Name: args[0], KeyProvider: keyProvider})
			if done, err := g.jsonOrErr(ct, err); done {
				return err
			}
			fmt.Fprintf(g.Err, "Created tenant %s (%s). Its first admin key, shown only now:\n", ct.Tenant.Name, ct.Tenant.ID)
			fmt.Fprintln(g.Out, ct.APIKey.Key)
			return nil
		},
	}
	create.Flags().StringVar(&keyProvider, "key-provider", "local", `where the tenant's key-encryption keys live: "local" or "pkcs11" (the HSM or KMS of airlock up --pkcs11-module)`)
	cmd.AddCommand(
		create,
		newTenantRuntimesCmd(g),
		&cobra.Command{
			Use:     "ls",
			Aliases: []string{"list"},
			Short:   "List the tenants",
			Args:    cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				defer interruptible(cmd)()
				l, err := g.client().ListTenants(cmd.Context())
				if done, err := g.jsonOrErr(l, err); done {
					return err
				}
				t := newTable(g.Out, "ID", "NAME", "STATUS", "CREATED")
				for _, tn := range l.Tenants {
					status := "enabled"
					if tn.Disabled {
						status = "disabled"
					}
					if tn.Operator {
						status += ", operator"
					}
					t.row(tn.ID, tn.Name, status, tn.CreatedAt.Local().Format(time.DateTime))
				}
				return t.flush()
			},
		},
		&cobra.Command{
			Use:   "get ID",
			Short: "Describe a tenant",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				defer interruptible(cmd)()
				tn, err := g.client().GetTenant(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return printJSON(g.Out, tn)
			},
		},
		newTenantQuotaCmd(g),
		newTenantSetDisabledCmd(g, "disable", true, "Disable a tenant: its API keys and access tokens are refused"),
		newTenantSetDisabledCmd(g, "enable", false, "Enable a disabled tenant again"),
	)
	return cmd
}

func newTenantQuotaCmd(g *globals) *cobra.Command {
	var q wire.Quotas
	cmd := &cobra.Command{
		Use:     "quota ID",
		Short:   "Set a tenant's quotas (all of them; 0 is no limit)",
		Example: `  airlock tenant quota tn_… --running-sandboxes 20 --sessions 100 --snapshot-bytes 50000000000`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			tn, err := g.client().UpdateTenant(cmd.Context(), args[0], wire.UpdateTenantRequest{Quotas: &q})
			if err != nil {
				return err
			}
			return printJSON(g.Out, tn)
		},
	}
	f := cmd.Flags()
	f.Int64Var(&q.RunningSandboxes, "running-sandboxes", 0, "sandboxes creating, running or stopping, sessions' included")
	f.Int64Var(&q.Sessions, "sessions", 0, "sessions not deleted")
	f.Int64Var(&q.SnapshotBytes, "snapshot-bytes", 0, "bytes the tenant's snapshots add to the snapshot store")
	return cmd
}

func newUsageCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "usage",
		Short: "Show your tenant's quotas and what counts against them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			u, err := g.client().Usage(cmd.Context())
			if done, err := g.jsonOrErr(u, err); done {
				return err
			}
			limit := func(n int64) string {
				if n == 0 {
					return "no limit"
				}
				return fmt.Sprint(n)
			}
			t := newTable(g.Out, "WHAT", "USED", "QUOTA")
			t.row("running sandboxes", fmt.Sprint(u.Usage.RunningSandboxes), limit(u.Quotas.RunningSandboxes))
			t.row("sessions", fmt.Sprint(u.Usage.Sessions), limit(u.Quotas.Sessions))
			t.row("snapshot bytes", fmt.Sprint(u.Usage.SnapshotBytes), limit(u.Quotas.SnapshotBytes))
			return t.flush()
		},
	}
}

func newTenantRuntimesCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "runtimes ID [RUNTIME...]",
		Short: "Show or set the runtimes a tenant's sandboxes may run on",
		Long: `With only an ID, print the runtimes the tenant may use; with runtimes, set them ("*" is every one;
"default" alone restores the default: every runtime for the operator's tenant, gvisor for the others).
runc starts faster but shares the host's kernel: allow it only to tenants you trust that far.`,
		Example: `  airlock tenant runtimes tn_… gvisor runc
  airlock tenant runtimes tn_… default`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			var tn *wire.Tenant
			var err error
			if len(args) == 1 {
				tn, err = g.client().GetTenant(cmd.Context(), args[0])
			} else {
				names := args[1:]
				if len(names) == 1 && names[0] == "default" {
					names = []string{}
				}
				tn, err = g.client().UpdateTenant(cmd.Context(), args[0], wire.UpdateTenantRequest{Runtimes: &names})
			}
			if done, err := g.jsonOrErr(tn, err); done {
				return err
			}
			fmt.Fprintf(g.Out, "tenant %s may use: %s\n", tn.ID, strings.Join(tn.Runtimes, ", "))
			return nil
		},
	}
}

func newTenantSetDisabledCmd(g *globals, use string, disabled bool, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use + " ID",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			tn, err := g.client().UpdateTenant(cmd.Context(), args[0], wire.UpdateTenantRequest{Disabled: &disabled})
			if done, err := g.jsonOrErr(tn, err); done {
				return err
			}
			fmt.Fprintf(g.Out, "tenant %s %sd\n", tn.ID, use)
			return nil
		},
	}
}

func newKeyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Manage your tenant's API keys (with an admin key)",
		Long: `API keys authenticate to the API. Each has a scope: read (get, list, read files), write (also create,
change, delete, run processes, write files) or admin (also manage the tenant's keys). A key is shown once,
when it is made; Airlock keeps only its hash.`,
	}
	var scope string
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create an API key and print it (shown only once)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			k, err := g.client().CreateAPIKey(cmd.Context(), args[0], scope)
			if done, err := g.jsonOrErr(k, err); done {
				return err
			}
			fmt.Fprintf(g.Err, "Created API key %s (%s, scope %s), shown only now:\n", k.Name, k.ID, k.Scope)
			fmt.Fprintln(g.Out, k.Key)
			return nil
		},
	}
	create.Flags().StringVar(&scope, "scope", wire.ScopeWrite, "admin, write or read")
	cmd.AddCommand(create,
		&cobra.Command{
			Use:     "ls",
			Aliases: []string{"list"},
			Short:   "List the API keys, revoked ones included",
			Args:    cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				defer interruptible(cmd)()
				l, err := g.client().ListAPIKeys(cmd.Context())
				if done, err := g.jsonOrErr(l, err); done {
					return err
				}
				now := time.Now()
				t := newTable(g.Out, "ID", "NAME", "SCOPE", "PREFIX", "CREATED", "LAST USED", "REVOKED")
				for _, k := range l.APIKeys {
					t.row(k.ID, k.Name, k.Scope, k.Prefix+"…", relTime(&k.CreatedAt, now), relTime(k.LastUsedAt, now), relTime(k.RevokedAt, now))
				}
				return t.flush()
			},
		},
		&cobra.Command{
			Use:   "revoke ID",
			Short: "Revoke an API key at once",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				defer interruptible(cmd)()
				return g.client().RevokeAPIKey(cmd.Context(), args[0])
			},
		},
	)
	return cmd
}

func newTokenCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make access tokens for one sandbox or session, to hand to an agent",
		Long: `An access token reaches the exec, process and file routes (and ports) of one sandbox or one session,
as its scopes allow, and nothing else. It expires (one hour by default, at most seven days) and can be
revoked. Use it as the API key: AIRLOCK_API_KEY=<token> airlock exec ID -- …`,
	}
	var (
		scopes []string
		ttl    time.Duration
		name   string
		port   int
	)
	create := &cobra.Command{
		Use:   "create SANDBOX-OR-SESSION-ID",
		Short: "Create an access token and print it (shown only once)",
		Example: `  airlock token create sb_… --scope exec --scope files --ttl 2h
  airlock token create se_… --scope files
  airlock token create sb_… --scope ports --port 8080     # one port only (see also: airlock port url)`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			req := wire.CreateAccessTokenRequest{Name: name, Scopes: scopes, TTLSeconds: int64(ttl / time.Second), Port: port}
			if err := setTokenTarget(&req, args[0]); err != nil {
				return err
			}
			tok, err := g.client().CreateAccessToken(cmd.Context(), req)
			if done, err := g.jsonOrErr(tok, err); done {
				return err
			}
			fmt.Fprintf(g.Err, "Created access token %s for %s (scopes %s, expires %s), shown only now:\n",
				tok.ID, args[0], strings.Join(tok.Scopes, ","), tok.ExpiresAt.Local().Format(time.DateTime))
			fmt.Fprintln(g.Out, tok.Token)
			return nil
		},
	}
	create.Flags().StringArrayVar(&scopes, "scope", []string{wire.TokenScopeExec, wire.TokenScopeFiles}, "exec, files or ports (repeat); files writes as root, so it can plant code: as strong as exec")
	create.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the token lasts (at most 168h)")
	create.Flags().StringVar(&name, "name", "", "a label for the token")
	create.Flags().IntVar(&port, "port", 0, "with scope ports: the one port the token reaches (default: every port)")
	cmd.AddCommand(create,
		&cobra.Command{
			Use:     "ls [SANDBOX-OR-SESSION-ID]",
			Aliases: []string{"list"},
			Short:   "List the access tokens that have not expired",
			Args:    cobra.MaximumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				defer interruptible(cmd)()
				var sb, se string
				if len(args) == 1 {
					if strings.HasPrefix(args[0], "se_") {
						se = args[0]
					} else {
						sb = args[0]
					}
				}
				l, err := g.client().ListAccessTokens(cmd.Context(), sb, se)
				if done, err := g.jsonOrErr(l, err); done {
					return err
				}
				now := time.Now()
				t := newTable(g.Out, "ID", "FOR", "SCOPES", "NAME", "CREATED BY", "EXPIRES", "REVOKED")
				for _, tok := range l.Tokens {
					target := tok.SandboxID + tok.SessionID
					t.row(tok.ID, target, strings.Join(tok.Scopes, ","), tok.Name, tok.CreatedBy, relTime(&tok.ExpiresAt, now), relTime(tok.RevokedAt, now))
				}
				return t.flush()
			},
		},
		&cobra.Command{
			Use:   "revoke ID",
			Short: "Revoke an access token at once",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				defer interruptible(cmd)()
				return g.client().RevokeAccessToken(cmd.Context(), args[0])
			},
		},
	)
	return cmd
}

func newEncryptionCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "encryption",
		Short: "Your tenant's encryption key: status, rotate, revoke",
		Long: `Everything Airlock keeps of a tenant (snapshots, secrets, OAuth tokens, interception CAs) is encrypted
under data keys that only the tenant's key-encryption key unwraps. It lives in Airlock's local keyring, or
in an HSM or KMS the customer controls (PKCS#11). Revoking it, or destroying it in the HSM, cuts Airlock
off: no sandbox of the tenant boots or resumes, its running sandboxes are stopped, nothing decrypts.`,
	}
	var yes string
	revoke := &cobra.Command{
		Use:   "revoke",
		Short: "Destroy the tenant's key for good (needs --confirm TENANT-ID)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			return g.client().RevokeTenantKey(cmd.Context(), yes)
		},
	}
	revoke.Flags().StringVar(&yes, "confirm", "", "the tenant's ID, to confirm")
	cmd.AddCommand(
		&cobra.Command{
			Use:   "status",
			Short: "Show where the tenant's key lives and whether it can be used",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				defer interruptible(cmd)()
				k, err := g.client().TenantKey(cmd.Context())
				if err != nil {
					return err
				}
				return printJSON(g.Out, k)
			},
		},
		&cobra.Command{
			Use:   "rotate",
			Short: "Make a new key-encryption key the current one",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				defer interruptible(cmd)()
				k, err := g.client().RotateTenantKey(cmd.Context())
				if err != nil {
					return err
				}
				return printJSON(g.Out, k)
			},
		},
		revoke,
	)
	return cmd
}

// setTokenTarget makes req a token for the sandbox or session id, by the ID's prefix.
func setTokenTarget(req *wire.CreateAccessTokenRequest, id string) error {
	switch {
	case strings.HasPrefix(id, "sb_"):
		req.SandboxID = id
	case strings.HasPrefix(id, "se_"):
		req.SessionID = id
	default:
		return fmt.Errorf("%q is neither a sandbox ID (sb_…) nor a session ID (se_…)", truncate(id, 64))
	}
	return nil
}
