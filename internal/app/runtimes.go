package app

import (
	"errors"
	"os/exec"
	"path/filepath"

	"github.com/airlockrun/airlock/internal/runtime"
	"github.com/airlockrun/airlock/internal/runtime/gvisor"
	"github.com/airlockrun/airlock/internal/runtime/runc"
	"github.com/airlockrun/airlock/internal/runtime/vm"
	"github.com/airlockrun/airlock/internal/runtime/vm/firecracker"
	"github.com/airlockrun/airlock/internal/runtime/vm/qemu"
)

// The runtime drivers a node can have, by name: the one place they are chosen. gVisor is every node's
// default; the others are opened when their tools are installed (scripts/install.sh installs runc,
// QEMU and the guest kernel; Firecracker is the operator's to install).
var runtimeDrivers = []struct {
	name string
	// open opens the driver for node h; available reports whether its tools are on this host.
	open      func(h hostNode) (runtime.Driver, func() error, error)
	available func(h hostNode) bool
}{
	{
		name: "gvisor",
		open: func(h hostNode) (runtime.Driver, func() error, error) {
			d, err := gvisor.New(gvisor.Config{Runsc: h.runsc, StateDir: filepath.Join(h.dataDir, "runtime"), Debug: h.debug, Logger: h.log,
				CgroupParent: "/airlock/" + h.tag})
			if err != nil {
				return nil, nil, err
			}
			return d, d.Close, nil
		},
		available: func(hostNode) bool { return true },
	},
	{
		name: "runc",
		open: func(h hostNode) (runtime.Driver, func() error, error) {
			d, err := runc.New(runc.Config{StateDir: filepath.Join(h.dataDir, "runtime-runc"), Logger: h.log,
				CgroupParent: "/airlock-runc/" + h.tag})
			if err != nil {
				return nil, nil, err
			}
			return d, d.Close, nil
		},
		available: func(hostNode) bool {
			_, err := exec.LookPath("runc")
			return err == nil
		},
	},
	{
		name: "vm:qemu",
		open: func(h hostNode) (runtime.Driver, func() error, error) {
			d, err := qemu.New(qemu.Config{StateDir: filepath.Join(h.dataDir, "runtime-vm-qemu"), DaemonBinary: h.daemon, Logger: h.log,
				CgroupParent: "/airlock-vm/" + h.tag, ProbeCache: KVMProbeCache})
			if err != nil {
				return nil, nil, err
			}
			return d, d.Close, nil
		},
		available: func(hostNode) bool {
			_, err := exec.LookPath("qemu-system-x86_64")
			if err != nil {
				return false
			}
			_, err = vm.FindKernel("")
			return err == nil
		},
	},
	{
		// Firecracker is not packaged by Debian: an operator installs firecracker and jailer (the
		// same release) on PATH; New refuses a host where KVM guests do not run.
		name: "vm:firecracker",
		open: func(h hostNode) (runtime.Driver, func() error, error) {
			d, err := firecracker.New(firecracker.Config{StateDir: filepath.Join(h.dataDir, "runtime-vm-firecracker"), DaemonBinary: h.daemon,
				Logger: h.log, CgroupParent: "/airlock-fc/" + h.tag})
			if err != nil {
				return nil, nil, err
			}
			return d, d.Close, nil
		},
		available: func(hostNode) bool {
			for _, b := range []string{"firecracker", "jailer"} {
				if _, err := exec.LookPath(b); err != nil {
					return false
				}
			}
			_, err := vm.FindKernel("")
			return err == nil
		},
	},
}

// KVMProbeCache keeps the answer of the VM drivers' KVM probe until the host reboots.
const KVMProbeCache = "/run/airlock/kvm-probe"

// openDrivers opens the node's runtime drivers: the first (gVisor) as its default, the others that
// this host has. It returns what closes them.
func openDrivers(h hostNode) (def runtime.Driver, more []runtime.Driver, closers []func() error, err error) {
	for i, rd := range runtimeDrivers {
		if !rd.available(h) {
			h.log.Info("runtime not available on this host", "runtime", rd.name)
			continue
		}
		d, closeFn, oerr := rd.open(h)
		if oerr != nil {
			if i == 0 {
				return nil, nil, closers, oerr
			}
			h.log.Warn("runtime not opened", "runtime", rd.name, "err", oerr)
			continue
		}
		closers = append(closers, closeFn)
		if def == nil {
			def = d
		} else {
			more = append(more, d)
		}
	}
	if def == nil {
		return nil, nil, closers, errors.New("no runtime driver could be opened")
	}
	return def, more, closers, nil
}

// RuntimeNames lists the runtimes a node may have, for flags' help.
func RuntimeNames() []string {
	var out []string
	for _, rd := range runtimeDrivers {
		out = append(out, rd.name)
	}
	return out
}
