package proto

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/errdefs"
)

func encodeFrame(t testing.TB, f Frame) []byte {
	t.Helper()
	b, err := AppendFrame(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFrameRoundTrip(t *testing.T) {
	frames := []Frame{
		{Type: TypeRequest, Stream: 1, Payload: []byte(`{"op":"ping"}`)},
		{Type: TypeData, Stream: 1<<32 - 1, Payload: AppendData(nil, ChannelStderr, 42, []byte("hi"))},
		{Type: TypeCancel, Stream: 7},
		{Type: TypeWindow, Stream: 3, Payload: EncodeWindow(100)},
		{Type: TypeGoAway, Stream: 0, Payload: EncodeGoAway(1<<32 - 1)},
		{Type: TypeData, Stream: 9, Payload: bytes.Repeat([]byte{1}, MaxPayload)},
		{Type: TypeData, Stream: 9, Payload: bytes.Repeat([]byte{2}, smallFrame+1)},
	}
	var buf bytes.Buffer
	for _, f := range frames {
		if err := WriteFrame(&buf, f); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range frames {
		got, err := ReadFrame(&buf)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if diff := cmp.Diff(want, got, cmp.Comparer(bytes.Equal)); diff != "" {
			t.Errorf("frame %d mismatch (-want +got):\n%s", i, diff)
		}
	}
	if _, err := ReadFrame(&buf); err != io.EOF {
		t.Errorf("ReadFrame at end = %v; want io.EOF", err)
	}
}

func TestReadFrameErrors(t *testing.T) {
	header := func(n uint32, typ byte, stream uint32) []byte {
		b := binary.BigEndian.AppendUint32(nil, n)
		b = append(b, typ)
		return binary.BigEndian.AppendUint32(b, stream)
	}
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"too large", header(MaxPayload+1, byte(TypeData), 1), ErrFrameTooLarge},
		{"huge length", header(1<<32-1, byte(TypeData), 1), errdefs.ErrTooLarge},
		{"unknown type", header(0, 99, 1), ErrBadFrame},
		{"type zero", header(0, 0, 1), ErrBadFrame},
		{"stream zero", header(0, byte(TypeRequest), 0), ErrBadFrame},
		{"goaway on a stream", header(4, byte(TypeGoAway), 1), ErrBadFrame},
		{"short header", []byte{0, 0, 0}, io.ErrUnexpectedEOF},
		{"short payload", append(header(10, byte(TypeData), 1), 1, 2, 3), io.ErrUnexpectedEOF},
		{"empty", nil, io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadFrame(bytes.NewReader(tt.in))
			if !errors.Is(err, tt.want) {
				t.Errorf("ReadFrame = %v; want %v", err, tt.want)
			}
		})
	}
	if err := WriteFrame(io.Discard, Frame{Type: TypeData, Stream: 1, Payload: make([]byte, MaxPayload+1)}); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("WriteFrame oversized = %v; want ErrFrameTooLarge", err)
	}
}

func TestDataAndWindow(t *testing.T) {
	d, err := DecodeData(AppendData(nil, ChannelStdout, 1<<40, []byte("abc")))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Data{Channel: ChannelStdout, Offset: 1 << 40, Bytes: []byte("abc")}, d); diff != "" {
		t.Errorf("DecodeData mismatch (-want +got):\n%s", diff)
	}
	for _, bad := range [][]byte{nil, {1, 2}, AppendData(nil, 7, 0, nil), append([]byte{1}, bytes.Repeat([]byte{0xff}, 8)...)} {
		if _, err := DecodeData(bad); !errors.Is(err, ErrBadFrame) {
			t.Errorf("DecodeData(%x) = %v; want ErrBadFrame", bad, err)
		}
	}
	for _, bad := range [][]byte{nil, {0, 0, 0, 0}, EncodeWindow(InitialWindow + 1), {1, 2, 3}} {
		if _, err := DecodeWindow(bad); !errors.Is(err, ErrBadFrame) {
			t.Errorf("DecodeWindow(%x) = %v; want ErrBadFrame", bad, err)
		}
	}
	if n, err := DecodeGoAway(EncodeGoAway(0)); n != 0 || err != nil {
		t.Errorf("DecodeGoAway(EncodeGoAway(0)) = %d, %v", n, err)
	}
	for _, bad := range [][]byte{nil, {1, 2, 3}, {1, 2, 3, 4, 5}} {
		if _, err := DecodeGoAway(bad); !errors.Is(err, ErrBadFrame) {
			t.Errorf("DecodeGoAway(%x) = %v; want ErrBadFrame", bad, err)
		}
	}
}

func TestDecodeRequest(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		wantOp  Op
		want    any
		wantErr error
	}{
		{"ping", `{"op":"ping"}`, OpPing, &PingRequest{}, nil},
		{"exec", `{"op":"exec","args":{"argv":["true"],"env":["A=b"],"timeout":1000000}}`, OpExec,
			&ExecRequest{Argv: []string{"true"}, Env: []string{"A=b"}, Timeout: time.Millisecond}, nil},
		{"start pty", `{"op":"start","args":{"argv":["sh"],"pty":{"rows":5,"cols":6},"stdin":true}}`, OpStart,
			&StartRequest{Argv: []string{"sh"}, PTY: &PTYSize{Rows: 5, Cols: 6}, Stdin: true}, nil},
		{"null args", `{"op":"list_processes","args":null}`, OpListProcesses, &ListProcessesRequest{}, nil},
		{"unknown op", `{"op":"format_disk"}`, "format_disk", nil, errdefs.ErrInvalidArgument},
		{"not json", `{{{`, "", nil, errdefs.ErrInvalidArgument},
		{"wrong arg type", `{"op":"stat","args":{"path":5}}`, OpStat, nil, errdefs.ErrInvalidArgument},
		{"empty argv[0]", `{"op":"exec","args":{"argv":[""]}}`, OpExec, nil, errdefs.ErrInvalidArgument},
		{"no argv: the template's command", `{"op":"exec","args":{"argv":[]}}`, OpExec, &ExecRequest{Argv: []string{}}, nil},
		{"dotdot", `{"op":"stat","args":{"path":"/a/../b"}}`, OpStat, nil, errdefs.ErrInvalidArgument},
		{"relative", `{"op":"read_file","args":{"path":"a"}}`, OpReadFile, nil, errdefs.ErrInvalidArgument},
		{"nul", `{"op":"stat","args":{"path":"/a\u0000b"}}`, OpStat, nil, errdefs.ErrInvalidArgument},
		{"bad env", `{"op":"exec","args":{"argv":["x"],"env":["=v"]}}`, OpExec, nil, errdefs.ErrInvalidArgument},
		{"bad mode", `{"op":"mkdir","args":{"path":"/a","mode":99999}}`, OpMkdir, nil, errdefs.ErrInvalidArgument},
		{"negative offset", `{"op":"attach","args":{"id":"x","stdout_offset":-1}}`, OpAttach, nil, errdefs.ErrInvalidArgument},
		{"zero resize", `{"op":"resize","args":{"id":"x","rows":0,"cols":3}}`, OpResize, nil, errdefs.ErrInvalidArgument},
		{"move dotdot", `{"op":"move","args":{"from":"/a","to":"/b/.."}}`, OpMove, nil, errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op, args, err := DecodeRequest([]byte(tt.payload))
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("DecodeRequest error = %v; want %v", err, tt.wantErr)
			}
			if op != tt.wantOp {
				t.Errorf("op = %q; want %q", op, tt.wantOp)
			}
			if tt.want != nil {
				if diff := cmp.Diff(tt.want, args); diff != "" {
					t.Errorf("args mismatch (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestRequestRoundTrip(t *testing.T) {
	req := &ExecRequest{Argv: []string{"echo", "hi"}, Env: []string{"K=v"}, Cwd: "/tmp", User: "root", Timeout: time.Second, MaxOutput: 10, HasStdin: true, Stdin: []byte("not on the wire")}
	b, err := EncodeRequest(OpExec, req)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("not on the wire")) {
		t.Errorf("encoded request carries Stdin: %s", b)
	}
	op, args, err := DecodeRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	want := *req
	want.Stdin = nil
	if diff := cmp.Diff(&want, args); op != OpExec || diff != "" {
		t.Errorf("round trip: op %q, mismatch (-want +got):\n%s", op, diff)
	}
	if _, err := EncodeRequest(OpExec, &ExecRequest{Argv: []string{strings.Repeat("x", MaxPayload)}}); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("oversized request = %v; want ErrFrameTooLarge", err)
	}
}

func TestResponseErrors(t *testing.T) {
	for _, sentinel := range []error{errdefs.ErrNotFound, errdefs.ErrInvalidArgument, errdefs.ErrTooLarge, errdefs.ErrFailedPrecondition, errdefs.ErrPermissionDenied} {
		payload := EncodeResponse(nil, errors.Join(errors.New("stat /x"), sentinel))
		err := DecodeResponse(payload, nil)
		if !errors.Is(err, sentinel) {
			t.Errorf("decoded %v; want errors.Is %v", err, sentinel)
		}
		if !strings.Contains(err.Error(), "stat /x") {
			t.Errorf("decoded message %q lost the context", err.Error())
		}
	}
	var info Info
	if err := DecodeResponse(EncodeResponse(Info{Version: "v1"}, nil), &info); err != nil || info.Version != "v1" {
		t.Errorf("result round trip: %+v, %v", info, err)
	}
	if err := DecodeResponse([]byte("nope"), nil); !errors.Is(err, errdefs.ErrInternal) {
		t.Errorf("bad response = %v; want ErrInternal", err)
	}
	big := EncodeResponse(map[string]string{"x": strings.Repeat("y", MaxPayload)}, nil)
	if err := DecodeResponse(big, nil); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("oversized result = %v; want ErrTooLarge", err)
	}
}

func TestCheckPath(t *testing.T) {
	for _, tt := range []struct {
		path string
		ok   bool
	}{
		{"/", true},
		{"/home/user/a.txt", true},
		{"/a//b/./c", true},
		{"/a/..b/c..", true},
		{"", false},
		{"a/b", false},
		{"/a/../b", false},
		{"/..", false},
		{"/a/b/..", false},
		{"/a\x00", false},
		{"/" + strings.Repeat("a", MaxPathLen), false},
	} {
		err := CheckPath(tt.path)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, errdefs.ErrInvalidArgument)) {
			t.Errorf("CheckPath(%q) = %v; want ok=%v", tt.path, err, tt.ok)
		}
	}
}

func TestRedactEnv(t *testing.T) {
	got := RedactEnv([]string{"TOKEN=secret", "EMPTY=", "ODD"})
	want := []string{"TOKEN=<redacted>", "EMPTY=<redacted>", "ODD=<redacted>"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RedactEnv mismatch (-want +got):\n%s", diff)
	}
}

func TestChannelJSON(t *testing.T) {
	b, _ := json.Marshal(Dropped{Channel: ChannelStderr, Bytes: 3})
	if !bytes.Contains(b, []byte(`"channel":"stderr"`)) {
		t.Errorf("Dropped encodes as %s", b)
	}
	var d Dropped
	if err := json.Unmarshal(b, &d); err != nil || d.Channel != ChannelStderr {
		t.Errorf("decode: %+v, %v", d, err)
	}
	if err := json.Unmarshal([]byte(`{"channel":"stdweird"}`), &d); err == nil {
		t.Errorf("unknown channel decoded")
	}
}

func TestWindows(t *testing.T) {
	w := NewSendWindow()
	ctx := context.Background()
	n, err := w.Acquire(ctx, InitialWindow)
	if err != nil || n != InitialWindow-FrameOverhead {
		t.Fatalf("Acquire = %d, %v; want %d", n, err, InitialWindow-FrameOverhead)
	}
	got := make(chan int, 1)
	go func() {
		n, _ := w.Acquire(ctx, 10)
		got <- n
	}()
	if err := w.Add(FrameOverhead); err != nil { // not enough for one byte
		t.Fatal(err)
	}
	select {
	case <-got:
		t.Fatal("Acquire returned without credit for a byte")
	case <-time.After(20 * time.Millisecond):
	}
	if err := w.Add(4); err != nil {
		t.Fatal(err)
	}
	if n := <-got; n != 4 {
		t.Errorf("Acquire after 4 more bytes of credit = %d; want 4", n)
	}
	w.Unreserve(4)
	if n, _ := w.Acquire(ctx, 100); n != 4 {
		t.Errorf("Acquire after Unreserve = %d; want 4", n)
	}
	w.Release(3)
	w.Release(FrameOverhead)
	if n, _ := w.Acquire(ctx, 100); n != 3 {
		t.Errorf("Acquire after Release = %d; want 3", n)
	}
	if err := w.Add(InitialWindow); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(InitialWindow + 1); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("over-granting Add = %v; want ErrInvalidArgument", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	w2 := NewSendWindow()
	w2.Acquire(ctx, InitialWindow)
	if _, err := w2.Acquire(cctx, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire on canceled ctx = %v", err)
	}
	closed := errors.New("closed")
	w2.Close(closed)
	if _, err := w2.Acquire(ctx, 1); err != closed {
		t.Errorf("Acquire after Close = %v; want %v", err, closed)
	}

	var r RecvWindow
	if err := r.Received(InitialWindow - FrameOverhead); err != nil {
		t.Fatal(err)
	}
	if err := r.Received(0); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("Received beyond the window = %v; want ErrResourceExhausted", err)
	}
	var r2 RecvWindow
	for range 10 {
		r2.Received(1)
	}
	credit := uint32(0)
	for range 10 {
		credit += r2.Consumed(1)
	}
	if credit != 0 && credit < WindowUpdateThreshold {
		t.Errorf("credit %d returned below the threshold", credit)
	}
	var r3 RecvWindow
	r3.Received(WindowUpdateThreshold - FrameOverhead)
	if c := r3.Consumed(WindowUpdateThreshold - FrameOverhead); c != WindowUpdateThreshold {
		t.Errorf("Consumed at threshold returned %d; want %d", c, WindowUpdateThreshold)
	}
}

func TestLogValueRedacts(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	log.Info("run", "exec", ExecRequest{Argv: []string{"x"}, Env: []string{"TOKEN=s3cret"}, Stdin: []byte("in-secret")},
		"start", StartRequest{Argv: []string{"y"}, Env: []string{"KEY=v4lue"}})
	out := buf.String()
	for _, secret := range []string{"s3cret", "in-secret", "v4lue"} {
		if strings.Contains(out, secret) {
			t.Errorf("log output %q contains %q", out, secret)
		}
	}
	if !strings.Contains(out, "TOKEN=<redacted>") {
		t.Errorf("log output %q lacks the redacted key", out)
	}
}

// TestControlEnv: an environment file is NUL-ended entries, read back as written; a file without its
// last NUL, an entry that is not KEY=VALUE, or one too large is refused.
func TestControlEnv(t *testing.T) {
	env := []string{"A=1", "B=two words", "EMPTY="}
	got, err := ParseControlEnv(FormatControlEnv(env))
	if err != nil || strings.Join(got, "|") != strings.Join(env, "|") {
		t.Errorf("round trip: %q, %v; want %q", got, err, env)
	}
	if got, err := ParseControlEnv(nil); err != nil || len(got) != 0 {
		t.Errorf("an empty file: %q, %v; want no entries", got, err)
	}
	for _, bad := range [][]byte{[]byte("A=1"), []byte("NOEQUALS\x00"), []byte("=x\x00"), FormatControlEnv([]string{"BIG=" + strings.Repeat("x", MaxCommandBytes)})} {
		if _, err := ParseControlEnv(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParseControlEnv(%.40q): %v; want invalid argument", bad, err)
		}
	}
}
