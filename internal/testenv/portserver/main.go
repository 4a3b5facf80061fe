// Command portserver is a small static server that tests of port forwarding copy into sandboxes and run
// there, so that what they reach through a forwarded port answers in a known way: HTTP/1.1 and cleartext
// HTTP/2 (h2c with prior knowledge) on one port, WebSocket and gRPC-style echoes, large and slow bodies,
// cookies, a JSON description of each request, and a raw TCP echo. It is not part of Airlock.
//
// Routes of the HTTP listeners:
//
//	GET  /ws              WebSocket echo: every message back with its type, until close
//	POST /grpc.Echo/Echo  gRPC unary echo on the wire format (HTTP/2 only): frames back, Grpc-Status 0
//	GET  /bytes?n=N       N bytes of 'x' (0 <= N <= 1<<30) with Content-Length
//	GET  /set-cookie      Set-Cookie airlock_token=evil and app=1, body "ok"
//	GET  /slow?ms=N       "slow done" after N milliseconds
//	/                     anything else: the request described as JSON
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
)

const (
	maxBytes   = 1 << 30          // largest /bytes body
	maxGRPCMsg = 4 << 20          // largest gRPC message, gRPC's default
	maxWSMsg   = 64 << 20         // largest WebSocket message
	maxSlow    = 10 * time.Minute // longest /slow delay
)

func main() {
	httpAddr := flag.String("http", "", "address of the HTTP/1.1 and h2c listener (empty: none)")
	http2Addr := flag.String("http2", "", "address of a second HTTP listener with the same routes (empty: none)")
	tcpAddr := flag.String("tcp", "", "address of the raw TCP echo listener (empty: none)")
	name := flag.String("name", "portserver", "label included in responses")
	flag.Parse()
	log.SetFlags(0)
	if *httpAddr == "" && *http2Addr == "" && *tcpAddr == "" {
		log.Fatal("portserver: nothing to serve: give -http, -http2 or -tcp")
	}

	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	handler := newHandler(*name)
	errc := make(chan error, 3)
	for _, addr := range []string{*httpAddr, *http2Addr} {
		if addr == "" {
			continue
		}
		ln := listen("http", addr)
		srv := &http.Server{Handler: handler, Protocols: &protos, ReadHeaderTimeout: 30 * time.Second}
		go func() { errc <- srv.Serve(ln) }()
	}
	if *tcpAddr != "" {
		ln := listen("tcp", *tcpAddr)
		go func() { errc <- echoTCP(ln) }()
	}
	log.Fatal(<-errc) // runs until killed or a listener fails
}

// listen binds addr and logs the listener, or exits.
func listen(kind, addr string) net.Listener {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatalf("%s listener: %v", kind, err)
	}
	log.Printf("listening %s %s", kind, ln.Addr())
	return ln
}

// echoTCP copies each connection's bytes back to it until the peer closes its side.
func echoTCP(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("accept tcp: %w", err)
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}

func newHandler(name string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", echoWebSocket)
	mux.HandleFunc("POST /grpc.Echo/Echo", echoGRPC)
	mux.HandleFunc("GET /bytes", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		if err != nil || n < 0 || n > maxBytes {
			http.Error(w, "n must be an integer from 0 to 1<<30", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		chunk := bytes.Repeat([]byte{'x'}, 32<<10)
		for n > 0 {
			k := min(n, int64(len(chunk)))
			if _, err := w.Write(chunk[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("GET /set-cookie", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", "airlock_token=evil; Path=/")
		w.Header().Add("Set-Cookie", "app=1; Path=/")
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		ms, err := strconv.Atoi(r.URL.Query().Get("ms"))
		if err != nil || ms < 0 || time.Duration(ms)*time.Millisecond > maxSlow {
			http.Error(w, "ms must be an integer from 0 to 600000", http.StatusBadRequest)
			return
		}
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
			io.WriteString(w, "slow done")
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		cookies := []string{}
		for _, c := range r.Cookies() {
			cookies = append(cookies, c.Name)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"name": name, "method": r.Method, "path": r.URL.Path, "raw_query": r.URL.RawQuery,
			"proto": r.Proto, "host": r.Host, "headers": r.Header, "cookies": cookies,
			"remote_addr": r.RemoteAddr, "body_len": n,
		})
	})
	return mux
}

// echoWebSocket sends every message back with the same type until the peer closes.
func echoWebSocket(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return // Accept answered the request
	}
	defer c.CloseNow()
	c.SetReadLimit(maxWSMsg)
	ctx := r.Context()
	for {
		typ, msg, err := c.Read(ctx)
		if err != nil {
			return // a close frame is answered by Read
		}
		if err := c.Write(ctx, typ, msg); err != nil {
			return
		}
	}
}

// echoGRPC answers a gRPC call with the request's frames unchanged, then status OK in the trailers.
// A malformed frame ends the call with status INTERNAL.
func echoGRPC(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
		http.Error(w, "content type must be application/grpc", http.StatusUnsupportedMediaType)
		return
	}
	if r.ProtoMajor != 2 {
		http.Error(w, "gRPC needs HTTP/2", http.StatusHTTPVersionNotSupported)
		return
	}
	w.Header().Set("Content-Type", "application/grpc")
	w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
	w.WriteHeader(http.StatusOK)
	status, message := "0", ""
	if err := echoFrames(w, r.Body); err != nil {
		status, message = "13", err.Error()
	}
	w.Header().Set("Grpc-Status", status)
	w.Header().Set("Grpc-Message", message)
}

// echoFrames writes each gRPC frame of body back to w as it arrives. It reports a malformed frame.
func echoFrames(w http.ResponseWriter, body io.Reader) error {
	rc := http.NewResponseController(w)
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(body, hdr[:]); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read frame header: %w", err)
		}
		if hdr[0] != 0 {
			return fmt.Errorf("compressed frames are not supported")
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n > maxGRPCMsg {
			return fmt.Errorf("message of %d bytes is larger than %d", n, maxGRPCMsg)
		}
		msg := make([]byte, n)
		if _, err := io.ReadFull(body, msg); err != nil {
			return fmt.Errorf("read message: %w", err)
		}
		if _, err := w.Write(append(hdr[:], msg...)); err != nil {
			return err
		}
		if err := rc.Flush(); err != nil {
			return err
		}
	}
}
