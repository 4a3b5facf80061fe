package vm

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/runtime"
)

// RandomMAC is a locally administered unicast address.
func RandomMAC() string {
	b := randBytes(6)
	b[0] = b[0]&0xfe | 0x02
	return net.HardwareAddr(b).String()
}

// Identity is what a guest is told of itself when it boots or is restored: the link key and the rest of
// spec's identity (host name, address, clock, entropy, machine ID), all fresh.
func Identity(spec runtime.Spec, key []byte, addr Network) proto.VMControl {
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.ID
	}
	m := proto.VMControl{Key: key, ControlEnv: spec.ControlEnv, Hostname: hostname, UnixNano: time.Now().UnixNano(),
		Seed: randBytes(64), MachineID: hex.EncodeToString(randBytes(16))}
	if addr.IsValid() {
		m.Address, m.Gateway = addr.String(), addr.Gateway.String()
	}
	return m
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}
