package vm

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// DefaultUIDBase is the first uid of the QEMU driver's VMMs: no user of the host's, and apart from
// runc's range. Each driver has a range of its own (the Firecracker driver's follows this one), so that
// no two VMMs on a node ever share a uid.
const DefaultUIDBase = 1 << 29

// UIDCount is how many uids a driver's VMs have: at most that many VMs at once.
const UIDCount = 65536

// UIDs hands out a driver's VMM uids (and gids, of the same numbers): one per VM, never another VM's.
// A uid is claimed by a file of its number under Dir holding the sandbox's ID, and recorded in the
// sandbox's directory (the file "uid"), so that it survives a restart of the node.
type UIDs struct {
	// Dir holds the claims.
	Dir string
	// Base is the first uid of the range; the range is UIDCount long.
	Base int
}

// Take gives sandbox id a uid of its own: the first free one of the range from a point the ID chooses.
// sandboxDir is the sandbox's directory, where the claim is recorded. It reports the uid and its
// number in the range.
func (u UIDs) Take(id, sandboxDir string) (int, error) {
	h := fnv.New32a()
	h.Write([]byte(id))
	start := int(h.Sum32() % UIDCount)
	for i := range UIDCount {
		n := (start + i) % UIDCount
		f, err := os.OpenFile(u.file(n), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		_, err = f.WriteString(id)
		f.Close()
		if err != nil {
			os.Remove(u.file(n))
			return 0, err
		}
		if err := os.WriteFile(filepath.Join(sandboxDir, "uid"), []byte(strconv.Itoa(n)), 0o600); err != nil {
			os.Remove(u.file(n))
			return 0, err
		}
		return u.Base + n, nil
	}
	return 0, fmt.Errorf("all %d uids of VMs are taken: %w", UIDCount, errdefs.ErrResourceExhausted)
}

// Held reports the uid sandbox id holds, as its directory records it.
func (u UIDs) Held(id, sandboxDir string) (int, bool) {
	n, ok := u.held(id, sandboxDir)
	return u.Base + n, ok
}

func (u UIDs) held(id, sandboxDir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(sandboxDir, "uid"))
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 || n >= UIDCount {
		return 0, false
	}
	if owner, err := os.ReadFile(u.file(n)); err != nil || string(owner) != id {
		return 0, false
	}
	return n, true
}

// Release frees the uid of sandbox id, if it holds one.
func (u UIDs) Release(id, sandboxDir string) {
	if n, ok := u.held(id, sandboxDir); ok {
		os.Remove(u.file(n))
	}
}

func (u UIDs) file(n int) string { return filepath.Join(u.Dir, strconv.Itoa(n)) }
