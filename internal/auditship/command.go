package auditship

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// Help is the long help of `airlock audit export`.
const Help = `Write the tenant's audit log to standard output as JSON lines (what "airlock audit verify" reads), or
ship it with --to from this machine to a destination (the server never connects to it):

  FILE                     appended to (created 0600); a file that already ends in an entry of the log
                           gets only the entries after it, so the file stays one verifiable export
  s3://BUCKET[/PREFIX]     an object of JSON lines per batch (at most 10,000 entries; with --follow,
                           what came within 10 s), PREFIX/TENANT/FIRST-LAST.jsonl with both sequence
                           numbers 20 digits wide: the objects in name order concatenate to one export
  syslog+udp://HOST:PORT   one RFC 5424 message per entry: MSG the JSON line, MSGID the entry's kind,
  syslog+tcp://HOST:PORT   structured data [airlock@32473 tenant seq hash]; TCP and TLS are framed by
  syslog+tls://HOST:PORT   octet counting (RFC 6587); a UDP message is at most 8 KiB, a longer entry's
                           MSG is cut and its structured data says truncated="<length>"

S3 settings: --s3-endpoint or AWS_ENDPOINT_URL (default: AWS), AWS_REGION (default us-east-1), and the
credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), never printed. TLS to
a syslog server verifies its certificate with the system's CAs, or with --syslog-ca's.

--follow keeps polling (every 2 s; each poll is an API call, so an entry of the log too) and ships new
entries as they come, retrying failures with a backoff, until SIGINT or SIGTERM: then it delivers what
it holds and exits 0. --state FILE records the last entry delivered, after each delivery (atomically,
0600), and a restart resumes after it; --after counts only while FILE does not exist. Delivery is at
least once: a crash between a delivery and the state's update ships that batch again, which a file or
bucket notices and skips, and a syslog server receives twice (same seq and hash).`

// Example is the examples of `airlock audit export`.
const Example = `  airlock audit export > audit.jsonl
  airlock audit export --to /var/log/airlock-audit.jsonl --follow --state ~/.airlock-audit.state
  AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=… airlock audit export --to s3://my-audit/airlock --follow --state audit.state
  airlock audit export --to syslog+tls://logs.example.com:6514 --syslog-ca ca.pem --follow --state audit.state`

// Flags are `airlock audit export`'s flags.
type Flags struct {
	After       int64
	To          string
	Follow      bool
	State       string
	S3Endpoint  string
	S3PathStyle bool
	SyslogCA    string

	fs *pflag.FlagSet
}

// AddFlags adds the flags to fs (and remembers fs, to tell which were given).
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	f.fs = fs
	fs.Int64Var(&f.After, "after", 0, "start after this entry's sequence number")
	fs.StringVar(&f.To, "to", "-", "where to ship: -, FILE, s3://BUCKET[/PREFIX], syslog+udp|tcp|tls://HOST:PORT")
	fs.BoolVar(&f.Follow, "follow", false, "keep shipping new entries until interrupted")
	fs.StringVar(&f.State, "state", "", "remember the last entry shipped in this file, and resume after it")
	fs.StringVar(&f.S3Endpoint, "s3-endpoint", "", "the S3 service's URL or host[:port] (default: AWS_ENDPOINT_URL, else AWS)")
	fs.BoolVar(&f.S3PathStyle, "s3-path-style", false, "address the bucket in the URL's path (most S3-compatible services)")
	fs.StringVar(&f.SyslogCA, "syslog-ca", "", "PEM file of the CAs that verify a syslog+tls server (default: the system's)")
}

func (f *Flags) changed(name string) bool { return f.fs != nil && f.fs.Changed(name) }

// Export runs `airlock audit export` with the flags: it checks them (an error names the flag at
// fault), then copies the log from src to stdout as the server sent it (no --to, --follow or
// --state), or ships it with a Shipper, telling on stderr what it shipped and what went wrong.
func (f *Flags) Export(ctx context.Context, src Source, stdout, stderr io.Writer) error {
	if f.After < 0 {
		return fmt.Errorf("--after %d: want a sequence number, 0 or more", f.After)
	}
	dest, err := ParseDest(f.To)
	if err != nil {
		return fmt.Errorf("--to %q: %w", f.To, err)
	}
	for _, c := range []struct{ flag, kind, form string }{
		{"s3-endpoint", KindS3, "an s3://"},
		{"s3-path-style", KindS3, "an s3://"},
		{"syslog-ca", KindSyslog, "a syslog+tls://"},
	} {
		if f.changed(c.flag) && (dest.Kind != c.kind || c.flag == "syslog-ca" && dest.Network != "tls") {
			return fmt.Errorf("--%s is only for %s destination (--to %q)", c.flag, c.form, f.To)
		}
	}
	if f.State != "" && dest.Kind == KindFile && sameFile(f.State, dest.Path) {
		return fmt.Errorf("--state %q is the file --to ships to; give the state a file of its own", f.State)
	}
	if dest.Kind == KindStdout && !f.Follow && f.State == "" {
		// As it always was: the server's bytes, copied.
		rc, err := src(ctx, f.After)
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.Copy(stdout, rc)
		return err
	}
	opts, err := f.options(dest, stdout)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	sink, err := dest.Open(opts, log)
	if err != nil {
		return fmt.Errorf("--to %q: %w", f.To, err)
	}
	defer sink.Close()
	sh := &Shipper{Source: src, Sink: sink, After: f.After, StatePath: f.State, Follow: f.Follow, Permanent: RefusedByAPI, Log: log}
	if dest.Kind == KindS3 {
		sh.BatchWait = 10 * time.Second
	}
	st, err := sh.Run(ctx)
	if dest.Kind != KindStdout {
		if st.Entries > 0 {
			fmt.Fprintf(stderr, "shipped %d entries (seq %d..%d) to %s\n", st.Entries, st.First, st.Last, dest)
		} else if err == nil {
			fmt.Fprintf(stderr, "nothing new to ship to %s\n", dest)
		}
	}
	return err
}

// options gathers the destination's settings from the flags and the environment.
func (f *Flags) options(dest Dest, stdout io.Writer) (Options, error) {
	opts := Options{Stdout: stdout}
	switch dest.Kind {
	case KindS3:
		opts.S3 = S3Config{Endpoint: f.S3Endpoint, Region: firstEnv("AWS_REGION", "AWS_DEFAULT_REGION"),
			AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"), SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY"), SessionToken: os.Getenv("AWS_SESSION_TOKEN"),
			PathStyle: f.S3PathStyle}
		from := "--s3-endpoint"
		if opts.S3.Endpoint == "" {
			for _, env := range []string{"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"} {
				if v := os.Getenv(env); v != "" {
					opts.S3.Endpoint, from = v, env
					break
				}
			}
		}
		if _, _, err := ParseS3Endpoint(opts.S3.Endpoint); err != nil {
			return opts, fmt.Errorf("%s: %w", from, err)
		}
	case KindSyslog:
		if f.SyslogCA != "" {
			pem, err := os.ReadFile(f.SyslogCA)
			if err != nil {
				return opts, fmt.Errorf("--syslog-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return opts, fmt.Errorf("--syslog-ca %s: no PEM certificate in it", f.SyslogCA)
			}
			opts.Syslog.RootCAs = pool
		}
	}
	return opts, nil
}

// RefusedByAPI reports the API's refusals that retrying does not mend: a 4xx other than 408 and 429.
func RefusedByAPI(err error) bool {
	var ae *airlock.APIError
	return errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 &&
		ae.Status != http.StatusRequestTimeout && ae.Status != http.StatusTooManyRequests
}

// sameFile reports whether paths a and b name one file (or would: they are the same path).
func sameFile(a, b string) bool {
	if fa, err := os.Stat(a); err == nil {
		if fb, err := os.Stat(b); err == nil {
			return os.SameFile(fa, fb)
		}
	}
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == bb
}

// firstEnv returns the first of the environment variables that is set.
func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}
