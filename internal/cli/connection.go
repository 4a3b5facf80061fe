package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockrun/airlock/api/wire"
	"github.com/airlockrun/airlock/internal/fsutil"
)

func newConnectionCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "connection",
		Aliases: []string{"conn"},
		Short:   "Sign in to OAuth providers outside the sandboxes, for credential bindings",
		Long: `An OAuth connection signs in to a provider on your behalf, outside every sandbox: Airlock runs the
authorization code flow with PKCE (you open the URL it prints) or the device flow (you enter the code it
prints), keeps the tokens encrypted and refreshes them before they expire. A credential binding that
names the connection (--network FILE, "connection": NAME) makes the gateway inject its current access
token; the sandbox never holds it.`,
	}
	cmd.AddCommand(newConnCreateCmd(g), newConnLsCmd(g), newConnGetCmd(g), newConnAuthorizeCmd(g), newConnRevokeCmd(g), newConnRmCmd(g))
	return cmd
}

func newConnCreateCmd(g *globals) *cobra.Command {
	var req wire.CreateConnectionRequest
	var secretEnv, secretFile string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a connection and start signing in",
		Long: `Create a connection and print what to do to sign in: a URL to open (--flow authorization_code, the
default) or a code to enter (--flow device). With --wait, wait until you have signed in.

The client secret is read from an environment variable (--client-secret-env) or a file
(--client-secret-file), never from the command line.`,
		Example: `  airlock connection create github --issuer https://token.actions.githubusercontent.com --client-id abc
  airlock connection create corp --flow device --issuer https://sso.corp.example --client-id cli \
      --client-secret-env CORP_CLIENT_SECRET --scope openid --scope offline_access --wait 5m`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			req.Name = args[0]
			switch {
			case secretEnv != "" && secretFile != "":
				return errors.New("give --client-secret-env or --client-secret-file, not both")
			case secretEnv != "":
				v, ok := os.LookupEnv(secretEnv)
				if !ok {
					return fmt.Errorf("--client-secret-env %s: the variable is not set", secretEnv)
				}
				req.Provider.ClientSecret = v
			case secretFile != "":
				b, err := fsutil.ReadFileLimit(secretFile, 8<<10)
				if err != nil {
					return fmt.Errorf("--client-secret-file: %w", err)
				}
				req.Provider.ClientSecret = strings.TrimRight(string(b), "\r\n")
			}
			si, err := g.client().CreateConnection(cmd.Context(), req)
			if err != nil {
				return err
			}
			return signInFlow(cmd.Context(), g, si, wait)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Flow, "flow", "authorization_code", `"authorization_code" (open a URL) or "device" (enter a code)`)
	f.StringVar(&req.Provider.Issuer, "issuer", "", "the provider's issuer URL, for OpenID Connect discovery of its endpoints")
	f.StringVar(&req.Provider.AuthorizationURL, "authorization-url", "", "the authorization endpoint (instead of discovery)")
	f.StringVar(&req.Provider.TokenURL, "token-url", "", "the token endpoint (instead of discovery)")
	f.StringVar(&req.Provider.DeviceAuthorizationURL, "device-authorization-url", "", "the device authorization endpoint (instead of discovery)")
	f.StringVar(&req.Provider.RevocationURL, "revocation-url", "", "the token revocation endpoint (instead of discovery)")
	f.StringVar(&req.Provider.ClientID, "client-id", "", "the OAuth client ID")
	f.StringArrayVar(&req.Provider.Scopes, "scope", nil, "a scope to ask for (repeat; include offline_access for refresh tokens)")
	f.StringVar(&secretEnv, "client-secret-env", "", "read the client secret from this environment variable")
	f.StringVar(&secretFile, "client-secret-file", "", "read the client secret from this file")
	f.DurationVar(&wait, "wait", 0, "wait this long for the sign-in to finish (0: don't wait)")
	return cmd
}

// signInFlow prints what the user must do and, with wait, waits for the connection to turn active.
func signInFlow(ctx context.Context, g *globals, si *wire.ConnectionSignIn, wait time.Duration) error {
	if g.json && wait == 0 {
		return printJSON(g.Out, si)
	}
	a := si.Authorization
	w := g.Out
	if g.json {
		w = g.Err
	}
	switch {
	case a.URL != "":
		fmt.Fprintf(w, "To sign in connection %s, open this URL in a browser (valid until %s):\n\n    %s\n\n", si.Connection.Name, a.ExpiresAt.Local().Format(time.Kitchen), a.URL)
	case a.UserCode != "":
		fmt.Fprintf(w, "To sign in connection %s, go to %s and enter the code %s (valid until %s).\n", si.Connection.Name, a.VerificationURI, a.UserCode, a.ExpiresAt.Local().Format(time.Kitchen))
		if a.VerificationURIComplete != "" {
			fmt.Fprintf(w, "Or open %s\n", a.VerificationURIComplete)
		}
	}
	if wait == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	c := &si.Connection
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("connection %s: still %s after %s", c.Name, c.Status, wait)
		case <-time.After(time.Second):
		}
		var err error
		if c, err = g.client().GetConnection(ctx, si.Connection.Name); err != nil {
			return err
		}
		switch {
		case c.Status == "active" && c.ConnectedAt != nil && !c.ConnectedAt.Before(si.Connection.UpdatedAt):
			if g.json {
				return printJSON(g.Out, c)
			}
			fmt.Fprintf(g.Out, "Connection %s is signed in.\n", c.Name)
			return nil
		case c.Status == "failed":
			return fmt.Errorf("connection %s: %s", c.Name, c.Error)
		}
	}
}

func newConnLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the connections",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			l, err := g.client().ListConnections(cmd.Context())
			if done, err := g.jsonOrErr(l, err); done {
				return err
			}
			t := newTable(g.Out, "NAME", "FLOW", "STATUS", "TOKEN EXPIRES", "REFRESHES", "ERROR")
			for _, c := range l.Connections {
				exp := "-"
				if c.TokenExpiresAt != nil {
					exp = c.TokenExpiresAt.Local().Format(time.DateTime)
				}
				t.row(c.Name, c.Flow, c.Status, exp, fmt.Sprint(c.Refreshes), c.Error)
			}
			return t.flush()
		},
	}
}

func newConnGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Describe a connection (never its tokens)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			c, err := g.client().GetConnection(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(g.Out, c)
		},
	}
}

func newConnAuthorizeCmd(g *globals) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "authorize NAME",
		Short: "Sign a connection in again (after a failure or a revocation)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			si, err := g.client().AuthorizeConnection(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return signInFlow(cmd.Context(), g, si, wait)
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait this long for the sign-in to finish (0: don't wait)")
	return cmd
}

func newConnRevokeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke a connection's tokens at the provider; injection stops at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			c, err := g.client().RevokeConnection(cmd.Context(), args[0])
			if done, err := g.jsonOrErr(c, err); done {
				return err
			}
			fmt.Fprintf(g.Out, "Connection %s is revoked.\n", c.Name)
			if c.Error != "" {
				fmt.Fprintf(g.Err, "warning: %s\n", c.Error)
			}
			return nil
		},
	}
}

func newConnRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Revoke and remove a connection",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer interruptible(cmd)()
			return g.client().DeleteConnection(cmd.Context(), args[0])
		},
	}
}
