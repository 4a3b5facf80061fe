package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// qmp is a client of QEMU's machine protocol (QMP) on a unix socket: one command at a time, events
// skipped.
type qmp struct {
	conn net.Conn
	r    *bufio.Reader
}

// dialQMP connects to QEMU's monitor socket and negotiates capabilities.
func dialQMP(ctx context.Context, path string) (*qmp, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	q := &qmp{conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	// The greeting, then capabilities.
	if _, err := q.readLine(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp greeting: %w", err)
	}
	if _, err := q.Execute(ctx, "qmp_capabilities", nil); err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

// Execute runs command with args and returns its "return" value.
func (q *qmp) Execute(ctx context.Context, command string, args any) (json.RawMessage, error) {
	deadline := time.Now().Add(time.Minute)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = q.conn.SetDeadline(deadline)
	req := map[string]any{"execute": command}
	if args != nil {
		req["arguments"] = args
	}
	b, _ := json.Marshal(req)
	if _, err := q.conn.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("qmp %s: %w", command, err)
	}
	return q.read(command)
}

func (q *qmp) readReturn(command string) error {
	_, err := q.read(command)
	return err
}

// read reads the answer to command, skipping events.
func (q *qmp) read(command string) (json.RawMessage, error) {
	for {
		line, err := q.readLine()
		if err != nil {
			return nil, fmt.Errorf("qmp %s: %w", command, err)
		}
		var resp struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class string `json:"class"`
				Desc  string `json:"desc"`
			} `json:"error"`
			Event string `json:"event"`
		}
		if err := json.Unmarshal(line, &resp); err != nil {
			return nil, fmt.Errorf("qmp %s: %w", command, err)
		}
		if resp.Event != "" {
			continue
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("qmp %s: %s: %s", command, resp.Error.Class, resp.Error.Desc)
		}
		return resp.Return, nil
	}
}

// Close closes the connection.
func (q *qmp) Close() error { return q.conn.Close() }

// SendFD gives QEMU a descriptor of f under name (QMP's getfd, the descriptor passed with the command).
func (q *qmp) SendFD(ctx context.Context, name string, f *os.File) error {
	uc, ok := q.conn.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("qmp getfd: not a unix socket")
	}
	b, _ := json.Marshal(map[string]any{"execute": "getfd", "arguments": map[string]string{"fdname": name}})
	_ = q.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, _, err := uc.WriteMsgUnix(append(b, '\n'), unix.UnixRights(int(f.Fd())), nil); err != nil {
		return fmt.Errorf("qmp getfd: %w", err)
	}
	return q.readReturn("getfd")
}

// maxQMPLine bounds a line of QEMU's: QEMU is the guest's first line of attack, so the node reads no
// more of it than its answers need.
const maxQMPLine = 1 << 20

// readLine reads one line of at most maxQMPLine bytes.
func (q *qmp) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := q.r.ReadSlice('\n')
		if len(line)+len(chunk) > maxQMPLine {
			return nil, fmt.Errorf("qmp: a line of over %d bytes", maxQMPLine)
		}
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		return line, err
	}
}

// poll runs command (query-migrate, query-status) every interval until done, given the answer's status
// and error description, says the answer is final or fails; ctx bounds it.
func (q *qmp) poll(ctx context.Context, command string, every time.Duration, done func(status, desc string) (bool, error)) error {
	for {
		raw, err := q.Execute(ctx, command, nil)
		if err != nil {
			return err
		}
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			return fmt.Errorf("qmp %s: %w", command, err)
		}
		if ok, err := done(st.Status, st.ErrorDesc); ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}
