package link

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/daemon/proto"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// newMux returns a Mux over a fake daemon, and n Clients through it.
func newMux(t *testing.T, n int) (*Mux, *fakeDaemon, []*Client) {
	t.Helper()
	a, b := net.Pipe()
	var rec recorder
	m := NewMux(a, &rec)
	t.Cleanup(func() { m.Close(); b.Close() })
	var cs []*Client
	for range n {
		c := NewClient(m.Pipe(), Options{})
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	return m, &fakeDaemon{t: t, conn: b, r: bufio.NewReader(b)}, cs
}

type recorder struct {
	mu sync.Mutex
	es []Entry
}

func (r *recorder) Record(e Entry) {
	r.mu.Lock()
	r.es = append(r.es, e)
	r.mu.Unlock()
}

// TestMuxRoutesByStream: two clients' calls, each on its own stream 1, reach the daemon on different
// streams, and each answer goes back to the client that asked, whatever the order.
func TestMuxRoutesByStream(t *testing.T) {
	_, f, cs := newMux(t, 2)
	type result struct {
		info proto.FileInfo
		err  error
	}
	res := make([]chan result, 2)
	for i, c := range cs {
		res[i] = make(chan result, 1)
		go func() {
			fi, err := c.Stat(context.Background(), []string{"/a", "/b"}[i])
			res[i] <- result{fi, err}
		}()
	}
	reqs := map[string]uint32{}
	for range 2 {
		fr := f.read()
		op, args, err := proto.DecodeRequest(fr.Payload)
		if err != nil || op != proto.OpStat || fr.Type != proto.TypeRequest {
			t.Fatalf("daemon got %s %s %v", fr.Type, op, err)
		}
		reqs[args.(*proto.StatRequest).Path] = fr.Stream
	}
	if reqs["/a"] == reqs["/b"] {
		t.Fatalf("both calls reached the daemon on stream %d", reqs["/a"])
	}
	f.write(proto.TypeResponse, reqs["/b"], proto.EncodeResponse(proto.FileInfo{Name: "b", Size: 2}, nil))
	f.write(proto.TypeResponse, reqs["/a"], proto.EncodeResponse(nil, errdefs.ErrNotFound))
	if r := <-res[1]; r.err != nil || r.info.Name != "b" {
		t.Errorf("second client got %+v, %v; want b", r.info, r.err)
	}
	if r := <-res[0]; !errors.Is(r.err, errdefs.ErrNotFound) {
		t.Errorf("first client got %v; want ErrNotFound", r.err)
	}
}

// TestMuxDataAndWindows: a download's data frames reach only the client that asked, and its window
// updates reach the daemon under the daemon's stream ID.
func TestMuxDataAndWindows(t *testing.T) {
	_, f, cs := newMux(t, 2)
	var got bytes.Buffer
	errc := make(chan error, 1)
	go func() { errc <- cs[1].ReadFile(context.Background(), "/big", &got) }()
	req := f.read()
	chunk := bytes.Repeat([]byte("x"), proto.ChunkSize)
	sent := 0
	for sent < proto.InitialWindow/2 {
		f.write(proto.TypeData, req.Stream, proto.AppendData(nil, proto.ChannelStdout, int64(sent), chunk))
		sent += len(chunk)
	}
	// The client returns credit as it consumes: a window frame on the daemon's stream.
	fr := f.read()
	if fr.Type != proto.TypeWindow || fr.Stream != req.Stream {
		t.Fatalf("daemon got %s on stream %d; want window on %d", fr.Type, fr.Stream, req.Stream)
	}
	f.write(proto.TypeResponse, req.Stream, proto.EncodeResponse(nil, nil))
	if err := <-errc; err != nil || got.Len() != sent {
		t.Fatalf("ReadFile = %d bytes, %v; want %d", got.Len(), err, sent)
	}
	// The other client is still fine. (More credit may still come for the download as its client
	// consumed the rest: the daemon reads past it to the ping.)
	go func() { errc <- cs[0].Ping(context.Background()) }()
	ping := f.read()
	for ping.Type == proto.TypeWindow && ping.Stream == req.Stream {
		ping = f.read()
	}
	if ping.Type != proto.TypeRequest {
		t.Fatalf("daemon got %s on stream %d; want the ping's request", ping.Type, ping.Stream)
	}
	f.write(proto.TypeResponse, ping.Stream, proto.EncodeResponse(nil, nil))
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestMuxClientGoneCancels: a client that goes away with a call open has the call canceled on the
// daemon; the answer that comes later is dropped and the others carry on.
func TestMuxClientGoneCancels(t *testing.T) {
	_, f, cs := newMux(t, 2)
	go cs[0].Exec(context.Background(), proto.ExecRequest{Argv: []string{"sleep", "9"}}) //nolint:errcheck // ends with the client
	req := f.read()
	cs[0].Close()
	fr := f.read()
	if fr.Type != proto.TypeCancel || fr.Stream != req.Stream {
		t.Fatalf("daemon got %s on %d; want cancel on %d", fr.Type, fr.Stream, req.Stream)
	}
	f.write(proto.TypeResponse, req.Stream, proto.EncodeResponse(proto.ExecResult{}, nil))
	errc := make(chan error, 1)
	go func() { errc <- cs[1].Ping(context.Background()) }()
	ping := f.read()
	f.write(proto.TypeResponse, ping.Stream, proto.EncodeResponse(nil, nil))
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestMuxDaemonGone: when the daemon's connection ends, every client sees its connection end, and a
// client that comes later is closed at once.
func TestMuxDaemonGone(t *testing.T) {
	m, f, cs := newMux(t, 2)
	f.conn.Close()
	for i, c := range cs {
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("client %d still up after the daemon went", i)
		}
	}
	<-m.Done()
	late := NewClient(m.Pipe(), Options{})
	defer late.Close()
	if err := late.Ping(context.Background()); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("a client after the daemon went: %v; want ErrUnavailable", err)
	}
}

// TestMuxDaemonGoAway: a daemon that ends its connection with a go-away (a VM's port cannot show the
// close) ends the Mux as a close does, its answer before it delivered first.
func TestMuxDaemonGoAway(t *testing.T) {
	m, f, cs := newMux(t, 1)
	done := make(chan error, 1)
	go func() { done <- cs[0].Quiesce(context.Background()) }()
	req := f.read()
	f.write(proto.TypeResponse, req.Stream, proto.EncodeResponse(nil, nil))
	f.write(proto.TypeGoAway, 0, proto.EncodeGoAway(req.Stream))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("quiesce: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("quiesce still waits after the daemon's go-away")
	}
	<-m.Done()
}

// TestMuxSlowClientDropped: a client that does not read its frames is dropped once the bound is passed;
// the daemon and the other clients are not held up.
func TestMuxSlowClientDropped(t *testing.T) {
	a, b := net.Pipe()
	m := NewMux(a, nil)
	m.maxQueue = 256 << 10
	defer m.Close()
	f := &fakeDaemon{t: t, conn: b, r: bufio.NewReader(b)}
	slow := m.Pipe() // nobody reads it
	defer slow.Close()
	if err := proto.WriteFrame(slow, proto.Frame{Type: proto.TypeRequest, Stream: 1, Payload: mustRequest(t, proto.OpReadFile, proto.ReadFileRequest{Path: "/x"})}); err != nil {
		t.Fatal(err)
	}
	req := f.read()
	chunk := bytes.Repeat([]byte("y"), proto.ChunkSize)
	for i := range 8 { // 512 KiB: twice the bound, within the stream's window
		f.write(proto.TypeData, req.Stream, proto.AppendData(nil, proto.ChannelStdout, int64(i*len(chunk)), chunk))
	}
	// The slow client's stream was canceled when it was dropped.
	fr := f.read()
	if fr.Type != proto.TypeCancel || fr.Stream != req.Stream {
		t.Fatalf("daemon got %s on %d; want cancel on %d", fr.Type, fr.Stream, req.Stream)
	}
	fast := NewClient(m.Pipe(), Options{})
	defer fast.Close()
	errc := make(chan error, 1)
	go func() { errc <- fast.Ping(context.Background()) }()
	ping := f.read()
	f.write(proto.TypeResponse, ping.Stream, proto.EncodeResponse(nil, nil))
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func mustRequest(t *testing.T, op proto.Op, args any) []byte {
	t.Helper()
	p, err := proto.EncodeRequest(op, args)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMuxLastAnswerBeforeDaemonGoes: an answer the daemon sends just before it closes its end (as it
// answers a quiesce) still reaches the client that asked, before the client's connection closes.
func TestMuxLastAnswerBeforeDaemonGoes(t *testing.T) {
	for range 20 {
		_, f, cs := newMux(t, 2)
		errc := make(chan error, 1)
		go func() { errc <- cs[0].Quiesce(context.Background()) }()
		req := f.read()
		f.write(proto.TypeResponse, req.Stream, proto.EncodeResponse(nil, nil))
		f.conn.Close()
		if err := <-errc; err != nil {
			t.Fatalf("the answer sent just before the daemon went was lost: %v", err)
		}
		for i, c := range cs {
			select {
			case <-c.Done():
			case <-time.After(5 * time.Second):
				t.Fatalf("client %d still up after the daemon went", i)
			}
		}
	}
}

// TestMuxDropOthers: with a call in progress, DropOthers(ifIdle) leaves every client be; without one it
// drops all but the Mux's own (Pipe's first), whose calls go on, and no other client may start a call
// or join after. DropOthers without ifIdle drops them whatever is in progress.
func TestMuxDropOthers(t *testing.T) {
	m, f, cs := newMux(t, 3)
	own, other := cs[0], cs[1]
	errc := make(chan error, 1)
	go func() { errc <- other.Ping(context.Background()) }()
	ping := f.read()
	if m.Active() != 1 || m.DropOthers(true) {
		t.Fatalf("Active %d, and DropOthers(ifIdle) dropped with a call in progress", m.Active())
	}
	f.write(proto.TypeResponse, ping.Stream, proto.EncodeResponse(nil, nil))
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
		}
	}
	waitFor("the call's stream still counted after its answer", func() bool { return m.Active() == 0 })
	if !m.DropOthers(true) {
		t.Fatal("DropOthers(ifIdle) refused with nothing in progress")
	}
	for _, c := range cs[1:] {
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("a client other than the Mux's own was not dropped")
		}
	}
	late := NewClient(m.Pipe(), Options{})
	defer late.Close()
	select {
	case <-late.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a client joined after DropOthers")
	}
	go func() { errc <- own.Ping(context.Background()) }()
	ping = f.read()
	f.write(proto.TypeResponse, ping.Stream, proto.EncodeResponse(nil, nil))
	if err := <-errc; err != nil {
		t.Fatalf("the Mux's own client after DropOthers: %v", err)
	}

	// Without ifIdle: dropped with a call in progress, which is canceled on the daemon.
	m2, f2, cs2 := newMux(t, 2)
	go cs2[1].Exec(context.Background(), proto.ExecRequest{Argv: []string{"sleep", "9"}}) //nolint:errcheck // ends with the client
	req := f2.read()
	if !m2.DropOthers(false) {
		t.Fatal("DropOthers(false) refused")
	}
	if fr := f2.read(); fr.Type != proto.TypeCancel || fr.Stream != req.Stream {
		t.Fatalf("daemon got %s on %d; want cancel on %d", fr.Type, fr.Stream, req.Stream)
	}
}

// TestMuxGoAway: a client dropped by DropOthers is told, in a go-away frame, the last of its requests that
// reached the daemon; a request it sends after the drop never reaches the daemon, and its call in
// progress is canceled there.
func TestMuxGoAway(t *testing.T) {
	m, f, _ := newMux(t, 1) // the Mux's own client
	raw := m.Pipe()
	defer raw.Close()
	rr := bufio.NewReader(raw)
	send := func(id uint32) {
		t.Helper()
		p, err := proto.EncodeRequest(proto.OpPing, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := proto.WriteFrame(raw, proto.Frame{Type: proto.TypeRequest, Stream: id, Payload: p}); err != nil {
			t.Fatal(err)
		}
	}
	send(5)
	req := f.read()
	f.write(proto.TypeResponse, req.Stream, proto.EncodeResponse(nil, nil))
	if fr, err := proto.ReadFrame(rr); err != nil || fr.Type != proto.TypeResponse || fr.Stream != 5 {
		t.Fatalf("answer to 5: %+v, %v", fr, err)
	}
	send(6)
	inProgress := f.read()
	if !m.DropOthers(false) {
		t.Fatal("DropOthers(false) refused")
	}
	send(7) // after the drop: must not reach the daemon
	fr, err := proto.ReadFrame(rr)
	if err != nil || fr.Type != proto.TypeGoAway {
		t.Fatalf("dropped client got %+v, %v; want a go-away", fr, err)
	}
	if last, err := proto.DecodeGoAway(fr.Payload); err != nil || last != 6 {
		t.Fatalf("go-away says last %d (%v); want 6", last, err)
	}
	if fr := f.read(); fr.Type != proto.TypeCancel || fr.Stream != inProgress.Stream {
		t.Fatalf("daemon got %s on %d; want the cancel of %d (and never request 7)", fr.Type, fr.Stream, inProgress.Stream)
	}
	// Until the client closes, the Mux reads and drops what it sends (no reset may discard the go-away).
	send(8)
	raw.Close()
	f.write(proto.TypeResponse, inProgress.Stream, proto.EncodeResponse(nil, errdefs.ErrFailedPrecondition))
	if f.conn.SetReadDeadline(time.Now().Add(100*time.Millisecond)) == nil {
		if fr, err := proto.ReadFrame(f.r); err == nil {
			t.Errorf("daemon got %s on %d after the go-away; want nothing (request 8 dropped)", fr.Type, fr.Stream)
		}
	}
}

// TestClientGoAway: on a go-away the calls after its last stream id fail with ErrNotStarted at once, as
// does every new call; those up to it (which the Mux canceled) fail as unavailable, not as not started,
// and the client closes the connection. Stream ids that wrapped around past 2^32 count as after.
func TestClientGoAway(t *testing.T) {
	for _, start := range []uint32{0, 1<<32 - 2} {
		c, f := newFake(t, Options{})
		c.mu.Lock()
		c.nextID = start
		c.mu.Unlock()
		errs := map[uint32]chan error{}
		var ids []uint32
		for range 2 {
			errc := make(chan error, 1)
			go func() { errc <- c.Ping(context.Background()) }()
			req := f.read()
			ids = append(ids, req.Stream)
			errs[req.Stream] = errc
		}
		first, second := ids[0], ids[1]
		f.write(proto.TypeGoAway, 0, proto.EncodeGoAway(first))
		if err := <-errs[second]; !errors.Is(err, ErrNotStarted) || !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("start %d: call on stream %d after the go-away's %d = %v; want ErrNotStarted", start, second, first, err)
		}
		if err := <-errs[first]; errors.Is(err, ErrNotStarted) || !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("start %d: call on stream %d, up to the go-away's = %v; want unavailable, not ErrNotStarted", start, first, err)
		}
		if err := c.Ping(context.Background()); !errors.Is(err, ErrNotStarted) {
			t.Errorf("a call after a go-away = %v; want ErrNotStarted", err)
		}
		if fr, err := proto.ReadFrame(f.r); err == nil {
			t.Errorf("after a go-away the client sent %+v; want its connection closed", fr)
		}
	}
}
