package vm

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	goruntime "runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TapName is the tap device a VM's network device is on, in the sandbox's network namespace.
const TapName = "tap0"

// Network is a guest's network: its address and prefix, its gateway, and the link's MTU. The zero
// Network (not IsValid) is none.
type Network struct {
	netip.Prefix
	Gateway netip.Addr
	MTU     int
}

// WireNetwork prepares the network namespace at nsPath for a VM: it takes the address off the veth
// eth0 (the guest takes it), bridges eth0 with a new tap (TapName), and returns the address, the
// gateway and the tap's descriptor. With owner -1 the tap lasts as long as a descriptor of it is open
// (a VMM that takes descriptors, QEMU, is given one); with an owner, the tap is persistent and uid and
// gid owner may attach to it by name (a VMM that opens its tap itself, Firecracker, unprivileged) and
// it lasts as long as the namespace. Without a namespace, or without a veth in it, the VM gets no
// network device: the zero Network and a nil descriptor.
func WireNetwork(nsPath string, owner int) (Network, *os.File, error) {
	if nsPath == "" {
		return Network{}, nil, nil
	}
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return Network{}, nil, err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return Network{}, nil, err
	}
	defer h.Close()
	eth, err := h.LinkByName("eth0")
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return Network{}, nil, nil // a namespace without a veth: a VM without a network
		}
		return Network{}, nil, fmt.Errorf("eth0: %w", err)
	}
	addrs, err := h.AddrList(eth, netlink.FAMILY_V4)
	if err != nil || len(addrs) == 0 {
		return Network{}, nil, fmt.Errorf("eth0 has no address: %v", err)
	}
	routes, err := h.RouteList(eth, netlink.FAMILY_V4)
	if err != nil {
		return Network{}, nil, err
	}
	var a Network
	ip, _ := netip.AddrFromSlice(addrs[0].IP.To4())
	ones, _ := addrs[0].Mask.Size()
	a.Prefix = netip.PrefixFrom(ip, ones)
	for _, r := range routes {
		if r.Gw != nil && (r.Dst == nil || r.Dst.IP.IsUnspecified()) {
			a.Gateway, _ = netip.AddrFromSlice(r.Gw.To4())
		}
	}
	if !a.Gateway.IsValid() {
		return Network{}, nil, errors.New("eth0 has no default route")
	}
	tap, err := openTap(ns, TapName, owner)
	if err != nil {
		return Network{}, nil, err
	}
	ok := false
	defer func() {
		if !ok {
			tap.Close()
		}
	}()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	if err := h.LinkAdd(br); err != nil {
		return Network{}, nil, fmt.Errorf("bridge: %w", err)
	}
	tl, err := h.LinkByName(TapName)
	if err != nil {
		return Network{}, nil, err
	}
	// The tap's MTU is the veth's, so that the bridge passes what the gateway sends; the guest learns
	// it from the device (host_mtu).
	if err := h.LinkSetMTU(tl, eth.Attrs().MTU); err != nil {
		return Network{}, nil, fmt.Errorf("tap mtu: %w", err)
	}
	a.MTU = eth.Attrs().MTU
	for _, l := range []netlink.Link{eth, tl} {
		if err := h.LinkSetMaster(l, br); err != nil {
			return Network{}, nil, fmt.Errorf("bridge %s: %w", l.Attrs().Name, err)
		}
	}
	if err := h.AddrDel(eth, &addrs[0]); err != nil {
		return Network{}, nil, fmt.Errorf("take eth0's address: %w", err)
	}
	for _, l := range []netlink.Link{tl, br} {
		if err := h.LinkSetUp(l); err != nil {
			return Network{}, nil, err
		}
	}
	ok = true
	return a, tap, nil
}

// openTap creates the tap device name in namespace ns and returns its descriptor; with owner >= 0 the
// tap is persistent and owner's (uid and gid).
func openTap(ns netns.NsHandle, name string, owner int) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// setns changes only this thread: lock it, and let it die (never unlock) if it cannot go back.
		goruntime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			ch <- result{err: err}
			return
		}
		f, err := tunSetIff(name, owner)
		if err := netns.Set(orig); err != nil {
			if f != nil {
				f.Close()
			}
			ch <- result{err: err}
			return
		}
		goruntime.UnlockOSThread()
		ch <- result{f, err}
	}()
	r := <-ch
	return r.f, r.err
}

func tunSetIff(name string, owner int) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	if owner >= 0 {
		for _, req := range []struct {
			op  uint
			arg int
		}{{unix.TUNSETOWNER, owner}, {unix.TUNSETGROUP, owner}, {unix.TUNSETPERSIST, 1}} {
			if err := unix.IoctlSetInt(fd, req.op, req.arg); err != nil {
				unix.Close(fd)
				return nil, fmt.Errorf("tap %s owner: %w", name, err)
			}
		}
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun"), nil
}
