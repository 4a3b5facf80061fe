package proto

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// # A sandbox's identity
//
// Every sandbox of a template's start snapshot, of a warm pool and of a fork is restored from one image:
// whatever was random in its processes before the image was taken (an interpreter's random state, a
// tempfile name sequence, a kernel's session key) is the same in all of them. The node therefore gives
// each sandbox an identity of its own (OpIdentity) at boot and after every restore of a snapshot that is
// not its session's own: fresh entropy, a machine ID, its host name and the interpreter key. The daemon
// applies what it can (machine ID, host name, the kernel's pool), writes it all into IdentityFile, and
// after a restore runs the template's hooks (IdentityHooks), so that processes that seeded themselves
// before the image was taken seed again. A session's own resume keeps its identity: its processes go on
// where they were.

const (
	// IdentityFile is where, inside the sandbox, the daemon writes the identity (IdentityFileContents
	// as JSON): owned by root, readable by the group of the sandbox's default user (mode 0640), so by
	// the template's processes but not by other users' (a web server run as nobody). Its epoch changes
	// with every identity: processes that seeded before a restore compare it to know when to seed again.
	IdentityFile = "/etc/airlock/identity"
	// IdentityHooks is the directory of a template's identity hooks: after a restore that gave the
	// sandbox a new identity, the daemon runs each executable file in it (in name order, as root, with
	// the IdentityFile path as its argument, IdentityHookTimeout in all) before the sandbox is handed
	// over. Only a directory and files owned by root and writable by no one else count: a user cannot
	// plant one.
	IdentityHooks = "/etc/airlock/identity.d"
	// MachineIDFile is the machine ID's file, which the daemon replaces.
	MachineIDFile = "/etc/machine-id"
)

// Sizes of an identity's parts, in bytes.
const (
	IdentityEpochSize  = 16
	IdentitySeedSize   = 32
	InterpreterKeySize = 32
)

// IdentityRequest is a sandbox's identity (see OpIdentity).
type IdentityRequest struct {
	// Epoch names this identity (IdentityEpochSize random bytes).
	Epoch []byte `json:"epoch"`
	// Seed is fresh entropy (IdentitySeedSize bytes): the daemon mixes it into the kernel's pool where
	// the kernel lets it, and passes it on to the processes in IdentityFile.
	Seed []byte `json:"seed"`
	// MachineID is the new /etc/machine-id: 32 lower-case hex digits.
	MachineID string `json:"machine_id"`
	// Hostname is the sandbox's host name; the daemon sets it where it may (the runtime usually has).
	Hostname string `json:"hostname,omitempty"`
	// InterpreterKey (InterpreterKeySize bytes) is the secret the sandbox's code interpreter demands
	// of every request: only Airlock's API adds it, and only for callers that may run code.
	InterpreterKey []byte `json:"interpreter_key"`
	// Restored says the sandbox was restored from a snapshot that is not its session's own: its
	// processes seeded before; the hooks run.
	Restored bool `json:"restored,omitempty"`
}

// Validate checks the sizes and formats.
func (r *IdentityRequest) Validate() error {
	bad := func(what string) error { return fmt.Errorf("identity: %s: %w", what, errdefs.ErrInvalidArgument) }
	switch {
	case len(r.Epoch) != IdentityEpochSize:
		return bad("bad epoch size")
	case len(r.Seed) != IdentitySeedSize:
		return bad("bad seed size")
	case len(r.InterpreterKey) != InterpreterKeySize:
		return bad("bad interpreter key size")
	case !validMachineID(r.MachineID):
		return bad("machine id is not 32 lower-case hex digits")
	case len(r.Hostname) > 64 || strings.ContainsAny(r.Hostname, "/\x00 \t\n"):
		return bad("bad hostname")
	}
	return nil
}

func validMachineID(s string) bool {
	if len(s) != 32 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// LogValue prints the request without its secrets (the seed and the interpreter key).
func (r IdentityRequest) LogValue() slog.Value {
	return slog.GroupValue(slog.String("hostname", r.Hostname), slog.Bool("restored", r.Restored))
}

// Redacted is the request as an audit log may record it: what is not secret.
func (r IdentityRequest) Redacted() any {
	return struct {
		Hostname string `json:"hostname,omitempty"`
		Restored bool   `json:"restored,omitempty"`
	}{r.Hostname, r.Restored}
}

// IdentityFileContents is IdentityFile's JSON: the byte strings in lower-case hex.
type IdentityFileContents struct {
	Epoch          string `json:"epoch"`
	Seed           string `json:"seed"`
	MachineID      string `json:"machine_id"`
	Hostname       string `json:"hostname,omitempty"`
	InterpreterKey string `json:"interpreter_key"`
}

// MaxIdentityFile bounds what a reader of IdentityFile reads (the sandbox may have replaced it).
const MaxIdentityFile = 4096
