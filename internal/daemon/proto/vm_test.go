package proto

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// TestVMLines: control lines read back as written, one at a time; an oversized line and a line that
// does not decode are errors that leave the next line readable.
func TestVMLines(t *testing.T) {
	var b bytes.Buffer
	key := bytes.Repeat([]byte{7}, LinkKeySize)
	if err := WriteVMLine(&b, VMControl{Seq: 1, Key: key, Hostname: "h"}); err != nil {
		t.Fatal(err)
	}
	b.WriteString("{not json\n")
	b.WriteString(`{"seq":` + strings.Repeat("9", VMMaxLine) + "}\n")
	if err := WriteVMLine(&b, VMReport{Seq: 2, Listening: true}); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReaderSize(&b, 4096)
	var m VMControl
	if err := ReadVMLine(r, &m); err != nil || m.Seq != 1 || !bytes.Equal(m.Key, key) || m.Hostname != "h" || m.Check() != nil {
		t.Fatalf("first line: %+v, %v", m, err)
	}
	for i := range 2 {
		var x VMControl
		if err := ReadVMLine(r, &x); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("bad line %d: %v; want invalid argument", i, err)
		}
	}
	var rep VMReport
	if err := ReadVMLine(r, &rep); err != nil || rep.Seq != 2 || !rep.Listening {
		t.Errorf("the line after the bad ones: %+v, %v", rep, err)
	}
	if err := ReadVMLine(r, &rep); !errors.Is(err, io.EOF) {
		t.Errorf("at the end: %v; want EOF", err)
	}
	if err := WriteVMLine(io.Discard, VMControl{Env: []string{"A=" + strings.Repeat("x", VMMaxLine)}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("an oversized message was written: %v", err)
	}
}

// TestVMControlCheck: a message with a bad field is refused whole.
func TestVMControlCheck(t *testing.T) {
	for _, m := range []VMControl{
		{Key: []byte("short")},
		{Address: "10.0.0.1"},
		{Address: "fe80::1/64"},
		{Gateway: "nope"},
		{Hostname: "a/b"},
		{Hostname: strings.Repeat("h", 65)},
		{MachineID: "123"},
		{Seed: make([]byte, 513)},
		{Env: []string{"NOEQUALS"}},
		{ControlEnv: []string{"=x"}},
	} {
		if err := m.Check(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Check(%+v) = %v; want invalid argument", m, err)
		}
	}
	ok := VMControl{Key: make([]byte, LinkKeySize), Address: "100.64.0.2/30", Gateway: "100.64.0.1", Hostname: "sb", MachineID: strings.Repeat("a", 32), Env: []string{"A=1"}}
	if err := ok.Check(); err != nil {
		t.Errorf("a good message: %v", err)
	}
}

// TestSkipTo: the handshake's marker and nonce are found after junk (and a wrong nonce), nothing after
// them is consumed, and a stream of junk is given up on.
func TestSkipTo(t *testing.T) {
	nonce := []byte("0123456789abcdef")
	in := append(append(append([]byte("junk\x00airlock"), VMAck...), []byte("wrongnonce012345")...), VMAck...)
	in = append(append(in, nonce...), "rest"...)
	r := bytes.NewReader(in)
	if err := SkipTo(r, VMAck, nonce); err != nil {
		t.Fatal(err)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "rest" {
		t.Errorf("after the handshake: %q; want rest", rest)
	}
	if err := SkipTo(bytes.NewReader(bytes.Repeat([]byte{0}, VMMaxSkip+100)), VMAck, nonce); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("junk only: %v; want invalid argument", err)
	}
	if err := SkipTo(bytes.NewReader([]byte("short")), VMAck, nonce); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a short stream: %v; want EOF", err)
	}
}

// FuzzReadVMLine feeds arbitrary bytes to ReadVMLine, as a guest may send them: it never panics and
// never returns a line longer than VMMaxLine.
func FuzzReadVMLine(f *testing.F) {
	f.Add([]byte("{\"seq\":1,\"listening\":true}\n{\"seq\":2}\n"))
	f.Add([]byte("{\"seq\":\n\n\x00\xff"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReaderSize(bytes.NewReader(in), 16)
		for range 1000 {
			var rep VMReport
			if err := ReadVMLine(r, &rep); err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
				return
			}
		}
	})
}
