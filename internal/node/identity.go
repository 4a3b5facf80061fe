package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// A sandbox's identity (see proto.OpIdentity): what is its own and must not be shared with the other
// sandboxes restored from the same image (a template's start snapshot, a warm pool's, a fork's). The
// node makes it from fresh randomness and hands it to the daemon at boot and after every restore of
// such an image, before the sandbox is handed over; a session's own resume keeps the one it had.

// newIdentity is a fresh identity for sandbox id; restored says it was restored from an image made
// before (its processes seeded themselves before the image was taken).
func newIdentity(id string, restored bool) proto.IdentityRequest {
	mid := make([]byte, 16)
	req := proto.IdentityRequest{Epoch: make([]byte, proto.IdentityEpochSize), Seed: make([]byte, proto.IdentitySeedSize),
		InterpreterKey: make([]byte, proto.InterpreterKeySize), Hostname: id, Restored: restored}
	for _, b := range [][]byte{req.Epoch, req.Seed, req.InterpreterKey, mid} {
		rand.Read(b)
	}
	req.MachineID = hex.EncodeToString(mid)
	return req
}

// giveIdentity gives sandbox id a fresh identity. A daemon older than identities (a restore of an
// image made before them) cannot take one: the sandbox goes on with what it had, as it did then.
func (n *Local) giveIdentity(ctx context.Context, id string, restored bool) error {
	cl, err := n.Link(ctx, id)
	if err != nil {
		return err
	}
	err = cl.SetIdentity(ctx, newIdentity(id, restored))
	if restored && errors.Is(err, errdefs.ErrInvalidArgument) && strings.Contains(err.Error(), "unknown op") {
		n.log.Warn("the sandbox's daemon predates identities: it keeps the one of the image it was restored from", "sandbox", id)
		return nil
	}
	if err != nil {
		return fmt.Errorf("sandbox %s: give it an identity of its own: %w", id, err)
	}
	return nil
}
