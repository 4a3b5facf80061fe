package proto

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// # MicroVMs
//
// In a microVM sandbox (the vm runtime) the daemon talks to its node over two channels. Under QEMU they
// are two virtio-serial ports, each a byte stream between the guest and a unix socket of the node's:
//
//   - VMLinkPort carries the link protocol above. A port is one stream for the VM's whole life, so each
//     connection of the node starts with a handshake that finds its start in whatever a previous
//     connection left behind: the node sends VMSync and a fresh nonce, the daemon skips everything
//     before them and answers VMAck with the same nonce, and the node skips everything before that.
//   - VMControlPort carries VMControl messages from the node, one JSON object per line, and the
//     daemon's VMReport lines back. It stands in for the control directory of the container
//     runtimes (proto.ControlKey and the rest): the guest has no directory the host can write.
//
// Nothing a guest sends on either port is trusted beyond its own sandbox: the node reads at most
// VMMaxLine bytes a line and treats a report as a hint of timing only.

// Names of the virtio-serial ports (what the guest reads in /sys/class/virtio-ports/*/name).
const (
	VMLinkPort    = "airlock.link"
	VMControlPort = "airlock.ctl"
)

// Over virtio-vsock (Firecracker has no virtio-serial) the two channels are vsock ports the daemon
// listens on, and each connection of the node is a stream of its own: the link needs no handshake,
// and the control channel carries the same lines, each report on the connection the node last opened.
// The node reaches them through its VMM (Firecracker's "CONNECT PORT" on a unix socket). The guest's
// init learns that it is to use vsock, and the ports, from VMVsockParam on the kernel command line.
const (
	VMLinkVsockPort    = 1022
	VMControlVsockPort = 1023
	// VMVsockParam ("airlock.vsock=LINK,CONTROL") tells the guest's init to use those vsock ports.
	VMVsockParam = "airlock.vsock"
)

// VMNonceSize is the size of a link handshake's nonce.
const VMNonceSize = 16

// The link handshake's markers, each followed by the nonce.
var (
	VMSync = []byte("\x00airlock-vm-sync\x00")
	VMAck  = []byte("\x00airlock-vm-ack\x00")
)

// VMMaxSkip is how many bytes either side of a link handshake skips looking for its marker before it
// gives up.
const VMMaxSkip = 1 << 20

// VMMaxLine is the longest control or report line, newline included.
const VMMaxLine = MaxCommandBytes + 64<<10

// VMControl is one message of the node to a microVM's daemon. The first one, sent once the VM boots,
// has Argv: the guest's init sets the guest up with it and starts the daemon. Every message may give
// the sandbox a new identity (after a restore, or for a fork): each non-empty field replaces what the
// guest had.
type VMControl struct {
	// Seq numbers the node's messages to this VM; the daemon reports it once it applied the message.
	Seq int64 `json:"seq"`
	// Argv is the daemon's argv (first message only); Env the environment it starts with.
	Argv []string `json:"argv,omitempty"`
	Env  []string `json:"env,omitempty"`
	// Key is the link key (LinkKeySize bytes) the daemon proves itself with from now on.
	Key []byte `json:"key,omitempty"`
	// ControlEnv, if not nil, replaces the base environment when the daemon next wakes (ControlEnv).
	ControlEnv []string `json:"control_env,omitempty"`
	// Hostname is the guest's host name.
	Hostname string `json:"hostname,omitempty"`
	// Address is the guest's address and prefix on its network interface, Gateway its default route
	// (and resolver).
	Address string `json:"address,omitempty"`
	Gateway string `json:"gateway,omitempty"`
	// MAC is the guest interface's hardware address.
	MAC string `json:"mac,omitempty"`
	// UnixNano is the host's clock: the guest sets its own to it.
	UnixNano int64 `json:"unix_nano,omitempty"`
	// Seed is entropy the guest mixes into its random pool (a fork must not repeat its parent's numbers).
	Seed []byte `json:"seed,omitempty"`
	// MachineID replaces /etc/machine-id.
	MachineID string `json:"machine_id,omitempty"`
	// Processes caps the processes of each non-root user (RLIMIT_NPROC), first message only.
	Processes int64 `json:"processes,omitempty"`
	// Wake wakes a daemon quiesced for a checkpoint, as a change of the wake file does.
	Wake bool `json:"wake,omitempty"`
}

// Check reports whether m is well formed; the daemon applies nothing of a message that is not.
func (m *VMControl) Check() error {
	bad := func(what string) error {
		return fmt.Errorf("vm control message: %s: %w", what, errdefs.ErrInvalidArgument)
	}
	if m.Key != nil && len(m.Key) != LinkKeySize {
		return bad("bad key size")
	}
	if m.Address != "" {
		if p, err := netip.ParsePrefix(m.Address); err != nil || !p.Addr().Is4() {
			return bad("bad address")
		}
	}
	if m.Gateway != "" {
		if a, err := netip.ParseAddr(m.Gateway); err != nil || !a.Is4() {
			return bad("bad gateway")
		}
	}
	if len(m.Hostname) > 64 || bytes.ContainsAny([]byte(m.Hostname), "/\x00 \n") {
		return bad("bad hostname")
	}
	if len(m.MachineID) != 0 && len(m.MachineID) != 32 {
		return bad("bad machine id")
	}
	if len(m.Seed) > 512 {
		return bad("seed too long")
	}
	for _, env := range [][]string{m.Env, m.ControlEnv} {
		if _, err := ParseControlEnv(FormatControlEnv(env)); err != nil {
			return err
		}
	}
	return nil
}

// VMReport is one line of a microVM's daemon to its node.
type VMReport struct {
	// Seq is the last control message the daemon applied (0 before any).
	Seq int64 `json:"seq"`
	// Listening reports that the daemon accepts link connections.
	Listening bool `json:"listening,omitempty"`
	// Error is why the message Seq was not applied, if it was not.
	Error string `json:"error,omitempty"`
}

// WriteVMLine writes v as one JSON line.
func WriteVMLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b)+1 > VMMaxLine {
		return fmt.Errorf("vm line of %d bytes is over %d: %w", len(b)+1, VMMaxLine, errdefs.ErrInvalidArgument)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadVMLine reads one JSON line from r into v. A line longer than VMMaxLine is an error, and so is
// one that does not decode; either way the rest of the stream can still be read line by line.
func ReadVMLine(r *bufio.Reader, v any) error {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > VMMaxLine {
			// Skip the rest of the oversized line.
			for err == bufio.ErrBufferFull {
				_, err = r.ReadSlice('\n')
			}
			if err != nil {
				return err
			}
			return fmt.Errorf("vm line over %d bytes: %w", VMMaxLine, errdefs.ErrInvalidArgument)
		}
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("vm line: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// SkipTo reads from r until it has read marker followed by nonce, skipping at most VMMaxSkip bytes
// before them. It reads one byte at a time, so that nothing after the nonce is consumed.
func SkipTo(r io.Reader, marker, nonce []byte) error {
	want := append(append([]byte(nil), marker...), nonce...)
	var window []byte
	var b [1]byte
	for n := 0; n < VMMaxSkip+len(want); n++ {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return err
		}
		window = append(window, b[0])
		if len(window) > len(want) {
			window = window[1:]
		}
		if bytes.Equal(window, want) {
			return nil
		}
	}
	return fmt.Errorf("no handshake in %d bytes: %w", VMMaxSkip, errdefs.ErrInvalidArgument)
}
