// Command airlock runs AI agents' work in secure, disposable gVisor sandboxes: the server (airlock up),
// the in-sandbox daemon (airlock sandbox-init), and the client commands. See internal/cli.
package main

import (
	"os"

	"github.com/airlockrun/airlock/internal/cli"
)

func main() {
	os.Exit(cli.Execute())
}
