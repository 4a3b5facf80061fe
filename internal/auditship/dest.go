package auditship

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"

	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Kinds of destination.
const (
	KindStdout = "stdout"
	KindFile   = "file"
	KindS3     = "s3"
	KindSyslog = "syslog"
)

// Dest is a destination, as `airlock audit export --to` names it.
type Dest struct {
	// Kind is KindStdout, KindFile, KindS3 or KindSyslog.
	Kind string
	// Path is a file's path.
	Path string
	// Bucket and Prefix are an S3 destination's (Prefix without a slash at either end).
	Bucket, Prefix string
	// Network ("udp", "tcp" or "tls") and Addr (host:port) are a syslog destination's.
	Network, Addr string
}

// destForms lists the forms ParseDest takes, for its errors.
const destForms = "want -, a file path, s3://BUCKET[/PREFIX], or syslog+udp://, syslog+tcp://, syslog+tls://HOST:PORT"

// ParseDest reads a destination: "" or "-" (standard output), a file path, s3://BUCKET[/PREFIX], or
// syslog+udp://HOST:PORT, syslog+tcp://HOST:PORT, syslog+tls://HOST:PORT. Its errors wrap
// errdefs.ErrInvalidArgument and say what is wrong, not which flag it came from.
func ParseDest(s string) (Dest, error) {
	if s == "" || s == "-" {
		return Dest{Kind: KindStdout}, nil
	}
	if !strings.Contains(s, "://") {
		return Dest{Kind: KindFile, Path: s}, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return Dest{}, fmt.Errorf("%v; %s: %w", err, destForms, errdefs.ErrInvalidArgument)
	}
	bad := func(why string) (Dest, error) {
		return Dest{}, fmt.Errorf("%s; %s: %w", why, destForms, errdefs.ErrInvalidArgument)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return bad("no user, query or fragment")
	}
	switch strings.ToLower(u.Scheme) {
	case "s3":
		if err := s3utils.CheckValidBucketNameStrict(u.Host); err != nil {
			return bad(fmt.Sprintf("bucket %q: %v", u.Host, err))
		}
		prefix := strings.Trim(u.Path, "/")
		if !validPrefix(prefix) {
			return bad(fmt.Sprintf("key prefix %q: segments separated by single slashes, none . or .., at most 512 bytes", prefix))
		}
		return Dest{Kind: KindS3, Bucket: u.Host, Prefix: prefix}, nil
	case "syslog+udp", "syslog+tcp", "syslog+tls":
		if u.Path != "" && u.Path != "/" {
			return bad("a syslog destination has no path")
		}
		if _, port, err := net.SplitHostPort(u.Host); err != nil || port == "" || u.Hostname() == "" {
			return bad(fmt.Sprintf("syslog server %q: want HOST:PORT", u.Host))
		}
		return Dest{Kind: KindSyslog, Network: strings.TrimPrefix(strings.ToLower(u.Scheme), "syslog+"), Addr: u.Host}, nil
	}
	return bad(fmt.Sprintf("unknown scheme %q", u.Scheme))
}

// String returns the destination as ParseDest reads it.
func (d Dest) String() string {
	switch d.Kind {
	case KindFile:
		return d.Path
	case KindS3:
		if d.Prefix == "" {
			return "s3://" + d.Bucket
		}
		return "s3://" + d.Bucket + "/" + d.Prefix
	case KindSyslog:
		return "syslog+" + d.Network + "://" + d.Addr
	}
	return "-"
}

// Options are the settings of the destinations that have any.
type Options struct {
	// Stdout is where KindStdout writes.
	Stdout io.Writer
	// S3 is an S3 destination's service and credentials (Bucket and Prefix come from the Dest).
	S3 S3Config
	// Syslog is a syslog destination's settings (Network and Addr come from the Dest).
	Syslog SyslogConfig
}

// Open returns the Sink of d; log gets its warnings.
func (d Dest) Open(o Options, log *slog.Logger) (Sink, error) {
	switch d.Kind {
	case KindStdout:
		return Writer{W: o.Stdout}, nil
	case KindFile:
		return OpenFile(d.Path, log)
	case KindS3:
		cfg := o.S3
		cfg.Bucket, cfg.Prefix = d.Bucket, d.Prefix
		return NewS3(cfg, log)
	case KindSyslog:
		cfg := o.Syslog
		cfg.Network, cfg.Addr = d.Network, d.Addr
		return NewSyslog(cfg)
	}
	return nil, fmt.Errorf("destination kind %q: %w", d.Kind, errdefs.ErrInvalidArgument)
}
