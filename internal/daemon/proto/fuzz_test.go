package proto

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzReadFrame feeds arbitrary bytes to ReadFrame: it must never panic or allocate from an unchecked
// length, and every frame it accepts must re-encode to the bytes it was read from.
func FuzzReadFrame(f *testing.F) {
	f.Add(encodeFrame(f, Frame{Type: TypeRequest, Stream: 1, Payload: []byte(`{"op":"ping"}`)}))
	f.Add(encodeFrame(f, Frame{Type: TypeData, Stream: 2, Payload: AppendData(nil, ChannelStdout, 5, []byte("out"))}))
	f.Add(append(encodeFrame(f, Frame{Type: TypeCancel, Stream: 3}), encodeFrame(f, Frame{Type: TypeWindow, Stream: 3, Payload: EncodeWindow(9)})...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0, 1, 3, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		for {
			start := len(in) - r.Len()
			fr, err := ReadFrame(r)
			if err != nil {
				return
			}
			if len(fr.Payload) > MaxPayload || !fr.Type.Valid() || (fr.Stream == 0) != (fr.Type == TypeGoAway) {
				t.Fatalf("accepted invalid frame %+v", fr)
			}
			end := len(in) - r.Len()
			enc, err := AppendFrame(nil, fr)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(enc, in[start:end]) {
				t.Fatalf("re-encoding differs: %x vs %x", enc, in[start:end])
			}
			switch fr.Type {
			case TypeData:
				if d, err := DecodeData(fr.Payload); err == nil {
					if !bytes.Equal(AppendData(nil, d.Channel, d.Offset, d.Bytes), fr.Payload) {
						t.Fatalf("data re-encoding differs")
					}
				}
			case TypeWindow:
				if n, err := DecodeWindow(fr.Payload); err == nil && !bytes.Equal(EncodeWindow(n), fr.Payload) {
					t.Fatalf("window re-encoding differs")
				}
			case TypeGoAway:
				if n, err := DecodeGoAway(fr.Payload); err == nil && !bytes.Equal(EncodeGoAway(n), fr.Payload) {
					t.Fatalf("goaway re-encoding differs")
				}
			case TypeEvent:
				DecodeEvent(fr.Payload)
			case TypeResponse:
				var info Info
				DecodeResponse(fr.Payload, &info)
			}
		}
	})
}

// FuzzDecodeRequest feeds arbitrary payloads to DecodeRequest: no panics, and accepted requests
// re-encode to something that decodes to the same args.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"op":"ping"}`,
		`{"op":"exec","args":{"argv":["sh","-c","echo hi"],"env":["A=b"],"cwd":"/tmp","timeout":5000000000,"stdin":true}}`,
		`{"op":"start","args":{"argv":["bash"],"pty":{"rows":24,"cols":80},"user":"root"}}`,
		`{"op":"attach","args":{"id":"abc","stdout_offset":10}}`,
		`{"op":"write_file","args":{"path":"/home/user/x","mode":420}}`,
		`{"op":"tar_upload","args":{"dir":"/home/user"}}`,
		`{"op":"stat","args":{"path":"/a/../b"}}`,
		`{"op":"signal","args":{"id":"x","signal":"TERM","group":true}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		op, args, err := DecodeRequest(payload)
		if err != nil {
			return
		}
		enc, err := EncodeRequest(op, args)
		if err != nil {
			if len(payload) <= MaxPayload/2 {
				t.Fatalf("re-encode: %v", err)
			}
			return
		}
		op2, args2, err := DecodeRequest(enc)
		if err != nil || op2 != op {
			t.Fatalf("re-decode of %s: %q, %v", enc, op2, err)
		}
		a, _ := json.Marshal(args)
		b, _ := json.Marshal(args2)
		if !bytes.Equal(a, b) {
			t.Fatalf("args changed in round trip: %s vs %s", a, b)
		}
	})
}
