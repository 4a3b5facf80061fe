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
	// open opens the driver for the node of s; available reports whether its tools are on this host.
	open      func(s *system) (runtime.Driver, func() error, error)
	available func() bool
}{
	{
		name: "gvisor",
		open: func(s *system) (runtime.Driver, func() error, error) {
			return opened(gvisor.New(gvisor.Config{Runsc: s.host.Runsc, StateDir: filepath.Join(s.dataDir, "runtime"), Debug: s.host.Debug, Logger: s.log,
				CgroupParent: "/airlock/" + s.tag}))
		},
		available: func() bool { return true },
	},
	{
		name: "runc",
		open: func(s *system) (runtime.Driver, func() error, error) {
			return opened(runc.New(runc.Config{StateDir: filepath.Join(s.dataDir, "runtime-runc"), Logger: s.log,
				CgroupParent: "/airlock-runc/" + s.tag}))
		},
		available: func() bool { return onPath("runc") },
	},
	{
		name: "vm:qemu",
		open: func(s *system) (runtime.Driver, func() error, error) {
			return opened(qemu.New(qemu.Config{StateDir: filepath.Join(s.dataDir, "runtime-vm-qemu"), DaemonBinary: s.host.DaemonBinary, Logger: s.log,
				CgroupParent: "/airlock-vm/" + s.tag, ProbeCache: KVMProbeCache}))
		},
		available: func() bool { return onPath("qemu-system-x86_64") && haveKernel() },
	},
	{
		// Firecracker is not packaged by Debian: an operator installs firecracker and jailer (the
		// same release) on PATH; New refuses a host where KVM guests do not run.
		name: "vm:firecracker",
		open: func(s *system) (runtime.Driver, func() error, error) {
			return opened(firecracker.New(firecracker.Config{StateDir: filepath.Join(s.dataDir, "runtime-vm-firecracker"), DaemonBinary: s.host.DaemonBinary,
				Logger: s.log, CgroupParent: "/airlock-fc/" + s.tag}))
		},
		available: func() bool { return onPath("firecracker") && onPath("jailer") && haveKernel() },
	},
}

// opened is what a driver's New returned, as runtimeDrivers' open reports it.
func opened[D interface {
	runtime.Driver
	Close() error
}](d D, err error) (runtime.Driver, func() error, error) {
	if err != nil {
		return nil, nil, err
	}
	return d, d.Close, nil
}

// onPath reports whether the program bin is on PATH.
func onPath(bin string) bool {
	_, err := exec.LookPath(bin)
	return err == nil
}

// haveKernel reports whether the VM runtimes' guest kernel is installed.
func haveKernel() bool {
	_, err := vm.FindKernel("")
	return err == nil
}

// KVMProbeCache keeps the answer of the VM drivers' KVM probe until the host reboots.
const KVMProbeCache = "/run/airlock/kvm-probe"

// openDrivers opens the node's runtime drivers: the first (gVisor) as its default, the others that
// this host has. They are closed on close.
func (s *system) openDrivers() (def runtime.Driver, more []runtime.Driver, err error) {
	for i, rd := range runtimeDrivers {
		if !rd.available() {
			s.log.Info("runtime not available on this host", "runtime", rd.name)
			continue
		}
		d, closeFn, oerr := rd.open(s)
		if oerr != nil {
			if i == 0 {
				return nil, nil, oerr
			}
			s.log.Warn("runtime not opened", "runtime", rd.name, "err", oerr)
			continue
		}
		s.onClose(closeFn)
		if def == nil {
			def = d
		} else {
			more = append(more, d)
		}
	}
	if def == nil {
		return nil, nil, errors.New("no runtime driver could be opened")
	}
	return def, more, nil
}

// RuntimeNames lists the runtimes a node may have, for flags' help.
func RuntimeNames() []string {
	var out []string
	for _, rd := range runtimeDrivers {
		out = append(out, rd.name)
	}
	return out
}
