package vm

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// fakeVsockVMM listens on a unix socket as Firecracker's vsock device does and answers each
// connection's CONNECT with answer (nothing: it closes the connection), then writes after.
func fakeVsockVMM(t *testing.T, answer, after string) (string, <-chan string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "v.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		got <- line
		if answer == "" {
			return
		}
		io.WriteString(c, answer+after)
		io.Copy(io.Discard, c)
	}()
	return sock, got
}

func TestVsockConnect(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		want         error
	}{
		{"ok", "OK 1073741824\n", nil},
		{"nothing listens", "", errdefs.ErrUnavailable},
		{"refused", "ERR no\n", errdefs.ErrInvalidArgument},
		{"not a port", "OK x\n", errdefs.ErrInvalidArgument},
		{"endless", "OK " + strings.Repeat("1", 100), errdefs.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock, got := fakeVsockVMM(t, tc.answer, "guest's first bytes")
			conn, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			err = VsockConnect(context.Background(), conn, 1025)
			if line := <-got; line != "CONNECT 1025\n" {
				t.Fatalf("the VMM read %q; want %q", line, "CONNECT 1025\n")
			}
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("VsockConnect: %v; want %v", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Nothing of the guest's was read with the answer.
			b := make([]byte, len("guest's first bytes"))
			if _, err := io.ReadFull(conn, b); err != nil || string(b) != "guest's first bytes" {
				t.Fatalf("after the answer: %q, %v; want the guest's bytes", b, err)
			}
		})
	}
}
