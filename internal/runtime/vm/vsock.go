package vm

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// VsockConnect asks the VMM at the other end of conn, a fresh connection to its vsock unix socket
// (Firecracker's "hybrid" vsock: the socket is the device's uds_path), to connect it to the guest's
// vsock port: it writes "CONNECT PORT\n" and reads the VMM's "OK HOSTPORT\n". From then on conn is the
// guest's connection on port. A VMM that finds nothing listening there closes conn: an error.
// It reads nothing past the answer's newline, so no byte of the guest's is lost.
func VsockConnect(ctx context.Context, conn net.Conn, port uint32) error {
	deadline := time.Now().Add(5 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	defer conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "CONNECT "+strconv.FormatUint(uint64(port), 10)+"\n"); err != nil {
		return fmt.Errorf("vsock connect %d: %w", port, err)
	}
	// One byte at a time: what follows the newline is the guest's.
	var line []byte
	var b [1]byte
	for len(line) < maxVsockAnswer {
		if _, err := io.ReadFull(conn, b[:]); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return fmt.Errorf("vsock connect %d: nothing listens there: %w", port, errdefs.ErrUnavailable)
			}
			return fmt.Errorf("vsock connect %d: %w", port, err)
		}
		if b[0] == '\n' {
			return checkVsockAnswer(string(line), port)
		}
		line = append(line, b[0])
	}
	return fmt.Errorf("vsock connect %d: an answer of over %d bytes: %w", port, maxVsockAnswer, errdefs.ErrInvalidArgument)
}

// maxVsockAnswer bounds the VMM's answer ("OK " and a port number).
const maxVsockAnswer = 32

// checkVsockAnswer checks the VMM's answer line to a CONNECT.
func checkVsockAnswer(line string, port uint32) error {
	rest, ok := strings.CutPrefix(line, "OK ")
	if _, err := strconv.ParseUint(rest, 10, 32); !ok || err != nil {
		return fmt.Errorf("vsock connect %d: the VMM answered %q: %w", port, line, errdefs.ErrInvalidArgument)
	}
	return nil
}
