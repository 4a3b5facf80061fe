package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Main is the entry point of the daemon binary, run as the sandbox's init process. args are the
// command-line arguments without the program name:
//
//	-socket PATH     unix socket to listen on (required); a stale socket file is replaced
//	-control DIR     the control directory the host writes (see proto.ControlKey): the link key
//	                 the daemon proves itself with, and the wake file
//	-user NAME       default non-root user (default "user"), with -uid, -gid (default 1000) and
//	                 -home (default /home/user)
//	-image-user SPEC an image template's user (NAME, UID, NAME:GROUP, UID:GID): the default user
//	                 instead of -user when the root's user database resolves it
//	-workdir DIR     the working directory of processes whose request names none (an image
//	                 template's WorkingDir); default the user's home
//	-image-cmd JSON  the command of processes whose request names none, a JSON array (an image
//	                 template's Entrypoint followed by its Cmd); default none (such requests fail)
//	-log-level LEVEL debug, info, warn or error (default info); logs go to stderr
//	-vm-link DEV     in a microVM: the virtio-serial port of the link (see proto.VMLinkPort),
//	                 in place of -socket; with -vm-control DEV, the port of the node's control
//	                 messages, which the daemon writes into the -control directory (VMInit passes both).
//	                 Either may be vsock:PORT instead, a vsock port to listen on (the control one
//	                 as vsock:PORT,conn=FD with the node's connection VMInit accepted)
//	-version         print the version and exit
//
// As PID 1 (or, otherwise, as a child subreaper) it reaps every child, including orphans. On SIGTERM or
// SIGINT it kills all processes and exits 0. It returns the process exit code: 0 on a clean shutdown, 1
// on a serve error, 2 on bad arguments.
func Main(args []string) int {
	fs := flag.NewFlagSet("airlock-daemon", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	socket := fs.String("socket", "", "unix socket path to listen on")
	control := fs.String("control", "", "control directory (link key and wake file), written by the host")
	userName := fs.String("user", DefaultUserName, "default non-root user name")
	uid := fs.Int("uid", DefaultUID, "uid of the default user")
	gid := fs.Int("gid", DefaultGID, "gid of the default user")
	home := fs.String("home", DefaultHome, "home directory of the default user")
	imageUser := fs.String("image-user", "", "an image template's user: the default user when it resolves")
	workDir := fs.String("workdir", "", "working directory of processes whose request names none")
	imageCmd := fs.String("image-cmd", "", "the command of processes whose request names none, as a JSON array")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	vmLink := fs.String("vm-link", "", "in a microVM: the virtio-serial port of the link, in place of -socket")
	vmControlPort := fs.String("vm-control", "", "in a microVM: the virtio-serial port of the node's control messages")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *version {
		fmt.Println(Version)
		return 0
	}
	if *socket == "" && *vmLink == "" {
		fmt.Fprintln(os.Stderr, "airlock-daemon: -socket is required")
		fs.Usage()
		return 2
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(os.Stderr, "airlock-daemon: -log-level: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	var defaultArgv []string
	if *imageCmd != "" {
		if err := json.Unmarshal([]byte(*imageCmd), &defaultArgv); err != nil || len(defaultArgv) > 0 && defaultArgv[0] == "" {
			log.Warn("the image's command does not decode; requests must name theirs", "image_cmd", *imageCmd, "err", err)
			defaultArgv = nil
		}
	}
	du := User{Name: *userName, UID: *uid, GID: *gid, Home: *home}
	if *imageUser != "" {
		if u, err := ImageUser(*imageUser); err != nil {
			log.Warn("the image's user does not resolve; the default user stays", "user", *imageUser, "default", du.Name, "err", err)
		} else {
			du = u
		}
	}
	if *vmLink != "" && (*vmControlPort == "" || *control == "") {
		fmt.Fprintln(os.Stderr, "airlock-daemon: -vm-link needs -vm-control and -control")
		return 2
	}
	return run(*socket, *vmLink, *vmControlPort, Config{
		DefaultUser: du,
		WorkDir:     *workDir,
		DefaultArgv: defaultArgv,
		Env:         os.Environ(),
		ReapAll:     true,
		Control:     *control,
	}, log)
}

func run(socket, vmLink, vmControlPort string, cfg Config, log *slog.Logger) int {
	pid1 := os.Getpid() == 1
	if !pid1 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			log.Warn("cannot become a child subreaper; orphans will not be reaped", "err", err)
		}
	}
	var ln net.Listener
	var err error
	var vm *vmChannels
	if vmLink != "" {
		// In a VM the daemon is the guest kernel's own root: what it starts must not be (the
		// container runtimes give the same capabilities, from outside).
		if err := confineChildren(); err != nil {
			log.Error("confine the processes the daemon starts", "err", err)
			return 1
		}
		vm, err = listenVM(vmLink, vmControlPort, cfg.Control, log)
		if err == nil {
			ln = vm.ln
		}
		socket = vmLink
	} else {
		ln, err = listen(socket)
	}
	if err != nil {
		log.Error("listen", "socket", socket, "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// SIGUSR2 wakes a daemon quiesced for a checkpoint (the node sends it after the checkpoint, and to a
	// restored sandbox).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	wake := make(chan struct{}, 1)
	go func() { // owner: run; ends with the process
		for range sigs {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}()
	cfg.Listen = func() (net.Listener, error) { return listen(socket) }
	if vm != nil {
		cfg.Listen = vm.listen
		vm.ctl.wake = wake
		go vm.serve() // owner: run; ends with the process
		vm.ctl.setListening(true)
	}
	cfg.Wake = wake

	log.Info("airlock daemon serving", "version", Version, "socket", socket, "pid", os.Getpid())
	err = Serve(ctx, ln, cfg, log)
	if vm == nil {
		os.Remove(socket)
	}
	if pid1 {
		// Kill what is left (orphans outside the tracked process groups) and reap it.
		unix.Kill(-1, unix.SIGKILL)
		for {
			if _, err := unix.Wait4(-1, nil, 0, nil); err != nil && !errors.Is(err, unix.EINTR) {
				break
			}
		}
	}
	if err != nil {
		log.Error("serve", "err", err)
		return 1
	}
	log.Info("airlock daemon stopped")
	return 0
}

// listen listens on a unix socket at path, replacing a stale socket file, accessible to its owner only.
func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	// Whatever is at path goes: a stale socket, or anything a process in the sandbox put there (the
	// node connects only to a socket there, never through a link). A process that keeps putting
	// something back can make this fail; it only cuts its own sandbox off.
	var ln net.Listener
	var err error
	for range 10 {
		os.Remove(path)
		old := unix.Umask(0o077)
		ln, err = net.Listen("unix", path)
		unix.Umask(old)
		if err == nil || !errors.Is(err, unix.EADDRINUSE) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	if ul, ok := ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
	return ln, nil
}

// vmChannels are a microVM daemon's two channels to its node.
type vmChannels struct {
	ln     net.Listener                 // the link's
	listen func() (net.Listener, error) // listens on the link again, after a quiesce
	ctl    *vmControl
	serve  func() // serves the control channel; runs for the daemon's life
}

// listenVM opens a microVM's two channels (virtio-serial ports or vsock ports, see parseVMAddr): the
// link's, as a listener, and the control channel, whose messages go into the control directory dir.
func listenVM(link, control, dir string, log *slog.Logger) (*vmChannels, error) {
	la, err := parseVMAddr(link)
	if err != nil {
		return nil, err
	}
	ca, err := parseVMAddr(control)
	if err != nil {
		return nil, err
	}
	vc := &vmChannels{ctl: &vmControl{dir: dir, log: log}}
	if la.dev != "" {
		lp, err := openVPort(la.dev)
		if err != nil {
			return nil, err
		}
		vc.ln = lp.listener(log)
		vc.listen = func() (net.Listener, error) { return lp.listener(log), nil }
	} else {
		if vc.ln, err = listenVsock(la.port); err != nil {
			return nil, err
		}
		vc.listen = func() (net.Listener, error) { return listenVsock(la.port) }
	}
	if ca.dev != "" {
		cp, err := openVPort(ca.dev)
		if err != nil {
			vc.ln.Close()
			return nil, err
		}
		// Reports can go out at once (the first says the daemon listens), before serve runs.
		vc.ctl.out = cp.f
		vc.serve = func() { vc.ctl.run(cp.f) }
		return vc, nil
	}
	cln, err := listenVsock(ca.port)
	if err != nil {
		vc.ln.Close()
		return nil, err
	}
	var first net.Conn
	if ca.connFD >= 0 {
		// VMInit handed it over an exec: no process the daemon starts may inherit it.
		unix.CloseOnExec(ca.connFD)
		first = newVsockConn(ca.connFD, ca.port)
		if w, ok := first.(vmWriter); ok {
			vc.ctl.out = w
		}
	}
	vc.serve = func() { vc.ctl.serveVsock(cln, first) }
	return vc, nil
}
