package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/airlockrun/airlock/internal/auditship"
	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/testenv"
	"github.com/airlockrun/airlock/internal/testenv/s3test"
	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestAuditShip: `airlock audit export --to` ships a tenant's audit log from the tenant's side to a
// file, a bucket (a real S3-compatible server) and a syslog server (a real listener here), and each
// copy is the server's export, byte for byte, and verifies. --follow picks up entries appended after
// it started; a shipper killed with SIGKILL and started again with its --state file leaves no gap
// and no duplicate; SIGTERM delivers what it holds and exits 0. After the tenant's key is revoked the
// shipped bytes carry the chain and times only: not the command line the log recorded.
func TestAuditShip(t *testing.T) {
	e := testenv.Start(t, testenv.Options{})
	srv := s3test.Start(t)
	ctx := ctxT(t, 10*time.Minute)
	ct, err := e.Client.CreateTenant(ctx, "shipper")
	if err != nil {
		t.Fatal(err)
	}
	key := ct.APIKey.Key
	c := airlock.New(e.URL, airlock.WithAPIKey(key))
	sb, err := c.CreateSandbox(ctx, airlock.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	argv := "argv-marker-ship-41c7"
	if _, err := c.Exec(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"true", argv}}); err != nil {
		t.Fatal(err)
	}
	if !eventually(10*time.Second, func() bool { return bytes.Contains(exportAudit(t, c), []byte(argv)) }) {
		t.Fatal("positive control: the command line is not in the audit export while the key lives")
	}
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_ENDPOINT_URL", "http://"+srv.Endpoint)
	dir := t.TempDir()

	airlockCLI := func(stdin []byte, args ...string) (code int, stdout, stderr string) {
		var out, errb bytes.Buffer
		code = cli.Run(ctx, append([]string{"--url", e.URL, "--api-key", key}, args...), cli.Streams{In: bytes.NewReader(stdin), Out: &out, Err: &errb})
		return code, out.String(), errb.String()
	}
	// isExport checks that shipped is the server's export up to some entry, byte for byte (so: no
	// gap, no duplicate, nothing changed), holds at least one entry, and that airlock audit verify
	// accepts it.
	isExport := func(t *testing.T, what string, shipped []byte) (last int64) {
		t.Helper()
		log := exportAudit(t, c)
		if len(shipped) == 0 || !bytes.HasPrefix(log, shipped) || shipped[len(shipped)-1] != '\n' {
			t.Fatalf("%s is not the start of the server's export:\n%s\nexport:\n%s", what, truncate(string(shipped)), truncate(string(log)))
		}
		if code, out, errs := airlockCLI(shipped, "audit", "verify", "-"); code != 0 || !strings.HasPrefix(out, "ok: ") {
			t.Fatalf("audit verify of %s = %d %s %s", what, code, out, errs)
		}
		lines := bytes.Split(bytes.TrimSpace(shipped), []byte("\n"))
		var en airlock.AuditEntry
		if err := json.Unmarshal(lines[len(lines)-1], &en); err != nil {
			t.Fatal(err)
		}
		return en.Seq
	}
	bucket := func(t *testing.T, prefix string) ([]string, []byte) {
		t.Helper()
		mc, err := minio.New(srv.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, "")})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		var all []byte
		for o := range mc.ListObjectsIter(ctx, srv.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			obj, err := mc.GetObject(ctx, srv.Bucket, o.Key, minio.GetObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(obj)
			obj.Close()
			if err != nil {
				t.Fatal(err)
			}
			keys, all = append(keys, o.Key), append(all, b...)
		}
		return keys, all
	}

	file := filepath.Join(dir, "audit.jsonl")
	t.Run("stdout and a file", func(t *testing.T) {
		code, out, errs := airlockCLI(nil, "audit", "export")
		if code != 0 {
			t.Fatalf("export to stdout = %d %s", code, errs)
		}
		isExport(t, "the export on stdout", []byte(out))
		if code, _, errs := airlockCLI(nil, "audit", "export", "--to", file); code != 0 || !strings.HasPrefix(errs, "shipped ") {
			t.Fatalf("export --to FILE = %d %s", code, errs)
		}
		if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("the file: %v, %v; want mode 0600", fi.Mode(), err)
		}
		got, _ := os.ReadFile(file)
		first := isExport(t, "the file", got)
		if !bytes.Contains(got, []byte(argv)) {
			t.Error("positive control: the shipped file lacks the command line while the key lives")
		}
		// Again: only what is new is appended.
		if _, err := c.Usage(ctx); err != nil {
			t.Fatal(err)
		}
		code, _, errs = airlockCLI(nil, "audit", "export", "--to", file)
		if code != 0 || !strings.Contains(errs, "(seq "+strconv.FormatInt(first+1, 10)+"..") {
			t.Fatalf("a second export --to FILE = %d %q; want it to start at seq %d", code, errs, first+1)
		}
		got, _ = os.ReadFile(file)
		isExport(t, "the file after a second run", got)
	})

	t.Run("s3", func(t *testing.T) {
		dest := "s3://" + srv.Bucket + "/once"
		if code, _, errs := airlockCLI(nil, "audit", "export", "--to", dest, "--s3-path-style"); code != 0 {
			t.Fatalf("export --to %s = %d %s", dest, code, errs)
		}
		keys, data := bucket(t, "once/")
		if len(keys) != 1 || !strings.HasPrefix(keys[0], "once/"+ct.Tenant.ID+"/00000000000000000001-") {
			t.Errorf("objects %v; want one, once/%s/00000000000000000001-….jsonl", keys, ct.Tenant.ID)
		}
		isExport(t, "the objects", data)
	})

	t.Run("syslog over TLS", func(t *testing.T) {
		caFile, tlsCfg := syslogTestCA(t, dir)
		ln, err := tls.Listen("tcp", "127.0.0.1:0", tlsCfg)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		msgs := make(chan []byte, 100000)
		go func() {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
			br := bufio.NewReader(conn)
			for {
				n, err := br.ReadString(' ')
				if err != nil {
					return
				}
				size, _ := strconv.Atoi(strings.TrimSpace(n))
				m := make([]byte, size)
				if _, err := io.ReadFull(br, m); err != nil {
					return
				}
				msgs <- m
			}
		}()
		code, _, errs := airlockCLI(nil, "audit", "export", "--to", "syslog+tls://"+ln.Addr().String(), "--syslog-ca", caFile)
		if code != 0 {
			t.Fatalf("export to syslog = %d %s", code, errs)
		}
		m := regexp.MustCompile(`(?m)^shipped ([0-9]+) entries`).FindStringSubmatch(errs)
		if m == nil {
			t.Fatalf("the shipper does not say what it shipped: %s", errs)
		}
		n, _ := strconv.Atoi(m[1])
		var joined []byte
		for i := range n {
			select {
			case msgb := <-msgs:
				_, msg, ok := bytes.Cut(msgb, []byte("\xEF\xBB\xBF"))
				if !ok || !bytes.Contains(msgb, []byte(`[airlock@32473 tenant="`+ct.Tenant.ID+`" seq="`+strconv.Itoa(i+1)+`"`)) {
					t.Fatalf("message %d: %q", i, msgb)
				}
				joined = append(append(joined, msg...), '\n')
			case <-time.After(20 * time.Second):
				t.Fatalf("received %d messages of %d", i, n)
			}
		}
		isExport(t, "the syslog messages' MSGs", joined)
	})

	for _, dest := range []string{filepath.Join(dir, "followed.jsonl"), "s3://" + srv.Bucket + "/followed"} {
		isS3 := strings.HasPrefix(dest, "s3://")
		name := "file"
		if isS3 {
			name = "s3"
		}
		t.Run("follow, SIGKILL, restart, SIGTERM to "+name, func(t *testing.T) {
			shipped := func() []byte {
				if isS3 {
					_, b := bucket(t, "followed/")
					return b
				}
				b, _ := os.ReadFile(dest)
				return b
			}
			// The tenant's API calls go on all along: new entries.
			gctx, stopCalls := context.WithCancel(ctx)
			var calls sync.WaitGroup
			calls.Add(1)
			go func() {
				defer calls.Done()
				for gctx.Err() == nil {
					_, _ = c.Usage(gctx)
					time.Sleep(20 * time.Millisecond)
				}
			}()
			defer func() { stopCalls(); calls.Wait() }()

			state := filepath.Join(dir, "state-"+strconv.FormatBool(isS3))
			start := func() (*exec.Cmd, *bytes.Buffer) {
				args := []string{"audit", "export", "--to", dest, "--follow", "--state", state}
				if isS3 {
					args = append(args, "--s3-path-style")
				}
				cmd := exec.Command(testenv.Binary(t), args...)
				cmd.Env = append(os.Environ(), cli.EnvURL+"="+e.URL, cli.EnvAPIKey+"="+key)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				return cmd, &stderr
			}
			headSeq := func() int64 {
				lines := bytes.Split(bytes.TrimSpace(exportAudit(t, c)), []byte("\n"))
				var en airlock.AuditEntry
				_ = json.Unmarshal(lines[len(lines)-1], &en)
				return en.Seq
			}
			lastShipped := func() int64 {
				b := bytes.TrimSpace(shipped())
				if len(b) == 0 {
					return 0
				}
				var en airlock.AuditEntry
				_ = json.Unmarshal(b[bytes.LastIndexByte(b, '\n')+1:], &en)
				return en.Seq
			}
			waitPast := func(seq int64, what string) {
				t.Helper()
				if !eventually(60*time.Second, func() bool { return lastShipped() > seq }) {
					t.Fatalf("%s: nothing after seq %d was shipped within a minute", what, seq)
				}
			}

			head := headSeq()
			p1, _ := start()
			waitPast(head, "the first shipper, following")
			// The state is written after each delivery: wait for the one of a delivery past head, then
			// SIGKILL (no flush, no further state update), so that the restart resumes from a state.
			if !eventually(60*time.Second, func() bool {
				st, ok, err := auditship.ReadState(state)
				return err == nil && ok && st.Seq > head
			}) {
				st, ok, err := auditship.ReadState(state)
				t.Fatalf("no state past seq %d within a minute of the first shipper's delivery: %+v %v %v", head, st, ok, err)
			}
			_ = p1.Process.Kill()
			_ = p1.Wait()

			head = headSeq()
			p2, stderr := start()
			waitPast(head, "the restarted shipper")
			_ = p2.Process.Signal(syscall.SIGTERM)
			if err := p2.Wait(); err != nil {
				t.Fatalf("the shipper after SIGTERM: %v; stderr:\n%s", err, stderr)
			}
			if !strings.Contains(stderr.String(), "shipped ") {
				t.Errorf("the shipper's stderr does not say what it shipped:\n%s", stderr)
			}
			stopCalls()
			calls.Wait()

			last := isExport(t, dest, shipped())
			st, _, err := auditship.ReadState(state)
			if err != nil || st.Seq != last || st.Tenant != ct.Tenant.ID {
				t.Errorf("state after SIGTERM = %+v, %v; want seq %d, the last shipped", st, err, last)
			}
			if fi, err := os.Stat(state); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("state file: %v, %v; want mode 0600", fi.Mode(), err)
			}
		})
	}

	t.Run("sealed after revoke", func(t *testing.T) {
		if b, _ := os.ReadFile(file); !bytes.Contains(b, []byte(argv)) {
			t.Fatal("positive control: the file shipped while the key lived lacks the command line")
		}
		if err := c.RevokeTenantKey(ctx, ct.Tenant.ID); err != nil {
			t.Fatal(err)
		}
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		revoked := filepath.Join(dir, "revoked.jsonl")
		for _, dest := range []string{revoked, "s3://" + srv.Bucket + "/revoked", "syslog+udp://" + pc.LocalAddr().String()} {
			args := []string{"audit", "export", "--to", dest}
			if strings.HasPrefix(dest, "s3://") {
				args = append(args, "--s3-path-style")
			}
			if code, _, errs := airlockCLI(nil, args...); code != 0 {
				t.Fatalf("export --to %s after the revoke = %d %s", dest, code, errs)
			}
		}
		got, _ := os.ReadFile(revoked)
		_, objects := bucket(t, "revoked/")
		var datagrams []byte
		buf := make([]byte, 65536)
		for {
			_ = pc.SetReadDeadline(time.Now().Add(2 * time.Second))
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				break
			}
			datagrams = append(datagrams, buf[:n]...)
		}
		for what, b := range map[string][]byte{"the file": got, "the objects": objects, "the syslog messages": datagrams} {
			if len(b) == 0 {
				t.Errorf("%s: nothing shipped", what)
			}
			if bytes.Contains(b, []byte(argv)) {
				t.Errorf("%s shipped after the key's revoke hold the command line", what)
			}
		}
		isExport(t, "the file shipped after the revoke", got)
		for _, line := range bytes.Split(bytes.TrimSpace(got), []byte("\n")) {
			var en airlock.AuditEntry
			if err := json.Unmarshal(line, &en); err != nil || en.Sealed == "" || en.Action != "" || en.Target != "" || en.Detail != "" || en.Actor != "" {
				t.Fatalf("an entry shipped after the revoke: %s (%v); want the chain and times only", line, err)
			}
		}
	})
}

// syslogTestCA writes a test CA's certificate to a file in dir and returns it and a server TLS
// configuration with a certificate it signed for 127.0.0.1.
func syslogTestCA(t *testing.T, dir string) (string, *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test syslog CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &leafKey.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "syslog-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}}
}
