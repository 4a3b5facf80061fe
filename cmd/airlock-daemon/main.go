// Command airlock-daemon is the in-sandbox daemon: the init process (PID 1) of every sandbox and the
// only process in it that talks outside, over one channel to its node. It is a static binary of its
// own that links only the daemon's packages (see internal/daemon), mounted read-only into each sandbox
// at /.airlock/init; the node starts it with -socket and -control. In a microVM it is also the
// initramfs's /init, which the kernel runs as "/init vminit" (see daemon.VMInit).
package main

import (
	"os"

	"github.com/airlockrun/airlock/internal/daemon"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "vminit" && os.Getpid() == 1 {
		os.Exit(daemon.VMInit())
	}
	os.Exit(daemon.Main(os.Args[1:]))
}
