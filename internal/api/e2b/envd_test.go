package e2b

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/controlplane"
	"github.com/airlockrun/airlock/internal/errdefs"
)

func TestEnvdResolve(t *testing.T) {
	user := envdTarget{home: "/home/user"}
	root := envdTarget{user: "root", home: "/root"}
	tests := []struct {
		t        envdTarget
		in, want string
		err      bool
	}{
		{user, "", "/home/user", false},
		{user, "~", "/home/user", false},
		{user, "~/a/b", "/home/user/a/b", false},
		{user, "notes/a.txt", "/home/user/notes/a.txt", false},
		{root, "x", "/root/x", false},
		{user, "/tmp/../etc/./passwd", "/etc/passwd", false},
		{user, "~bob/x", "", true},
		{user, "/tmp/a\x00b", "", true},
	}
	for _, tt := range tests {
		got, err := tt.t.resolve(tt.in)
		if tt.err {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("resolve(%q) = %q, %v; want invalid argument", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("resolve(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestEnvdUser(t *testing.T) {
	basic := func(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		auth, query, want string
		err               bool
	}{
		{"", "", "", false},
		{basic("user:"), "", "", false}, // E2B's "user" is the sandbox's default user
		{basic("root:"), "", "root", false},
		{"", "username=root", "root", false},
		{basic("1001:"), "", "1001", false},
		{basic("Robert'); DROP:"), "", "", true},
		{"Bearer x", "", "", true},
		{"Basic !!!", "", "", true},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("POST", "/e2b/files?"+tt.query, nil)
		if tt.auth != "" {
			r.Header.Set("Authorization", tt.auth)
		}
		got, err := envdUser(r)
		if tt.err {
			if !errors.Is(err, errdefs.ErrUnauthenticated) {
				t.Errorf("envdUser(%q, %q) = %q, %v; want unauthenticated", tt.auth, tt.query, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("envdUser(%q, %q) = %q, %v; want %q", tt.auth, tt.query, got, err, tt.want)
		}
	}
}

// The messages are written as protojson writes envd's: defaults left out, int64 as a string, bytes in
// base64, enums by name, a oneof as its member.
func TestEnvdJSON(t *testing.T) {
	mt := time.Date(2026, 5, 1, 10, 0, 0, 123000000, time.UTC)
	tests := []struct {
		v    any
		want string
	}{
		{envdProcessResponse{Event: envdProcessEvent{Start: &envdStartEvent{PID: 42}}}, `{"event":{"start":{"pid":42}}}`},
		{envdProcessResponse{Event: envdProcessEvent{Data: &envdDataEvent{Stdout: []byte("hello\n")}}}, `{"event":{"data":{"stdout":"aGVsbG8K"}}}`},
		{envdProcessResponse{Event: envdProcessEvent{Keepalive: &struct{}{}}}, `{"event":{"keepalive":{}}}`},
		{envdProcessResponse{Event: envdProcessEvent{End: endEvent(controlplane.ExitStatus{})}}, `{"event":{"end":{"exited":true,"status":"exit status 0"}}}`},
		{envdProcessResponse{Event: envdProcessEvent{End: endEvent(controlplane.ExitStatus{ExitCode: 3})}},
			`{"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3","error":"exit status 3"}}}`},
		{envdProcessResponse{Event: envdProcessEvent{End: endEvent(controlplane.ExitStatus{ExitCode: -1, Signal: "SIGKILL"})}},
			`{"event":{"end":{"exitCode":-1,"status":"signal: killed","error":"signal: killed"}}}`},
		{entryOf(controlplane.FileInfo{Name: "a.txt", Path: "/home/user/a.txt", Type: controlplane.FileTypeFile, Size: 6, Mode: 0o4644, ModTime: mt}),
			`{"name":"a.txt","type":"FILE_TYPE_FILE","path":"/home/user/a.txt","size":"6","mode":420,"permissions":"-rw-r--r--","modifiedTime":"2026-05-01T10:00:00.123Z"}`},
		{entryOf(controlplane.FileInfo{Name: "d", Path: "/d", Type: controlplane.FileTypeDir, Mode: 0o755}),
			`{"name":"d","type":"FILE_TYPE_DIRECTORY","path":"/d","mode":493,"permissions":"drwxr-xr-x"}`},
		{entryOf(controlplane.FileInfo{Name: "l", Path: "/l", Type: controlplane.FileTypeSymlink, Mode: 0o777, Target: "/etc/x"}),
			`{"name":"l","type":"FILE_TYPE_SYMLINK","path":"/l","mode":511,"permissions":"Lrwxrwxrwx","symlinkTarget":"/etc/x"}`},
		{envdWatchResponse{Filesystem: &envdFsEvent{Name: "sub/b.txt", Type: "EVENT_TYPE_CREATE"}}, `{"filesystem":{"name":"sub/b.txt","type":"EVENT_TYPE_CREATE"}}`},
	}
	for _, tt := range tests {
		b, err := envdJSON{}.Marshal(tt.v)
		if err != nil || string(b) != tt.want {
			t.Errorf("Marshal(%+v) = %s, %v\nwant %s", tt.v, b, err, tt.want)
		}
	}
	var sig envdSignalRequest
	for in, want := range map[string]envdSignal{`{"signal":"SIGNAL_SIGKILL"}`: "SIGNAL_SIGKILL", `{"signal":15}`: "SIGNAL_SIGTERM", `{"signal":3}`: ""} {
		if err := json.Unmarshal([]byte(in), &sig); err != nil || sig.Signal != want {
			t.Errorf("Unmarshal(%s) = %q, %v; want %q", in, sig.Signal, err, want)
		}
	}
	var empty envdStartRequest
	if err := (envdJSON{}).Unmarshal(nil, &empty); err != nil {
		t.Errorf("an empty body: %v", err)
	}
}

func TestCapReader(t *testing.T) {
	for _, tt := range []struct {
		in   string
		left int64
		ok   bool
	}{{"0123456789", 10, true}, {"0123456789x", 10, false}, {"", 0, true}, {"x", 0, false}} {
		b, err := io.ReadAll(&capReader{r: strings.NewReader(tt.in), left: tt.left})
		switch {
		case tt.ok && (err != nil || string(b) != tt.in):
			t.Errorf("capReader(%q, %d) = %q, %v; want it all", tt.in, tt.left, b, err)
		case !tt.ok && !errors.Is(err, errdefs.ErrTooLarge):
			t.Errorf("capReader(%q, %d) = %q, %v; want too large", tt.in, tt.left, b, err)
		}
	}
}
