package apiutil

import (
	"io"
	"log/slog"
	"net/http"
)

// MaxUpload caps file and tar upload bodies. The sandbox's disk limit bounds what fits anyway.
const MaxUpload = 1 << 30

// Download streams what send writes as a 200 with contentType. The header goes out with the first
// byte, so an error before it is still an error response (Download returns it, for the caller to
// write); after it, the response is broken off (the client sees a truncated body, never a silently
// short one with a clean end), and log says why.
func Download(w http.ResponseWriter, log *slog.Logger, contentType, path string, send func(io.Writer) error) error {
	lw := &lazyWriter{w: w, onFirst: func() { w.Header().Set("Content-Type", contentType) }}
	if err := send(lw); err != nil {
		if lw.started {
			log.Warn("download broke mid-stream", "path", path, "err", err)
			panic(http.ErrAbortHandler)
		}
		return err
	}
	if !lw.started {
		lw.onFirst()
		w.WriteHeader(http.StatusOK)
	}
	return nil
}

// lazyWriter sends the response header only when the first byte of the body is written, so that an error
// before it can still become an error response.
type lazyWriter struct {
	w       http.ResponseWriter
	onFirst func()
	started bool
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.onFirst()
		l.w.WriteHeader(http.StatusOK)
	}
	return l.w.Write(p)
}
