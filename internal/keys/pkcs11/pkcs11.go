// Package pkcs11 is the KeyProvider for keys a customer keeps in an HSM or KMS: each tenant's
// key-encryption key is an AES-256 key inside a PKCS#11 token (sensitive, not extractable), and data
// keys are wrapped with AES-GCM inside the token. Airlock never holds the key-encryption key: destroying
// it in the token (or taking the token away) makes every data key of the tenant, and so every byte
// encrypted under them, impossible to decrypt.
//
// The PKCS#11 module is a C library; it runs in a helper process, cmd/airlock-pkcs11, which this package
// starts and speaks a line protocol with (proto.go), so that a fault in a vendor's module cannot take
// Airlock down and Airlock itself stays a static, cgo-free binary.
//
// Keys are labelled "airlock/<tenant>/<n>", n counting up with each rotation; a small state file next to
// the provider records each tenant's labels, so that a key destroyed in the token reads as revoked (and
// is never silently made anew).
package pkcs11

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/fsutil"
	"github.com/airlockrun/airlock/internal/keys"
)

// StateFile is the provider's state file inside its directory.
const StateFile = "pkcs11.json"

const aadPrefix = "airlock/keys/pkcs11 v1\x00"

// Config configures a Provider.
type Config struct {
	// Helper is the path of the airlock-pkcs11 binary. Empty: next to the running executable, else on
	// PATH.
	Helper string
	// Module is the PKCS#11 module, TokenLabel the token, PIN its user PIN.
	Module     string
	TokenLabel string
	PIN        string
	// Env is added to the helper's environment (which is otherwise only PATH): settings a module
	// reads, such as SOFTHSM2_CONF.
	Env []string
	// Dir keeps the state file (0700 directory, 0600 file).
	Dir string
	// Timeout bounds one call to the token. Zero: 10 s.
	Timeout time.Duration
	Logger  *slog.Logger
}

// Provider is a keys.KeyProvider on a PKCS#11 token. It also implements keys.Revoker (destroying the
// tenant's keys in the token) and RotateKey. Safe for concurrent use; calls to the token are serialized.
type Provider struct {
	cfg   Config
	state string

	mu sync.Mutex
	// st is the state, as last written; guarded by mu.
	st stateFile
	// h is the running helper, nil until first needed or after it failed; guarded by mu.
	h *helper
}

var (
	_ keys.KeyProvider = (*Provider)(nil)
	_ keys.Revoker     = (*Provider)(nil)
	_ keys.Rotator     = (*Provider)(nil)
	_ keys.Checker     = (*Provider)(nil)
	_ keys.Owner       = (*Provider)(nil)
	_ keys.Retirer     = (*Provider)(nil)
)

// Owns implements keys.Owner: the provider's key IDs are its labels, "airlock/<tenant>/<n>".
func (p *Provider) Owns(keyID string) bool { return strings.HasPrefix(keyID, "airlock/") }

type stateFile struct {
	Tenants map[string]*tenantKeys `json:"tenants"`
}

type tenantKeys struct {
	// Labels are the tenant's keys, oldest first; the last is the current one.
	Labels []string `json:"labels"`
	// Retired are labels no data key needs any more (all were re-wrapped): Check skips them.
	Retired   []string   `json:"retired,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// New returns a provider. It reads the state file if there is one; the helper starts on first use.
func New(cfg Config) (*Provider, error) {
	if cfg.Module == "" || cfg.TokenLabel == "" || cfg.Dir == "" {
		return nil, fmt.Errorf("pkcs11: module, token label and directory are required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Helper == "" {
		cfg.Helper = defaultHelper()
	}
	p := &Provider{cfg: cfg, state: filepath.Join(cfg.Dir, StateFile), st: stateFile{Tenants: map[string]*tenantKeys{}}}
	b, err := os.ReadFile(p.state)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("pkcs11: %w", err)
	default:
		if err := json.Unmarshal(b, &p.st); err != nil {
			return nil, fmt.Errorf("pkcs11: read %s: %w", p.state, err)
		}
		if p.st.Tenants == nil {
			p.st.Tenants = map[string]*tenantKeys{}
		}
	}
	return p, nil
}

// HelperName is the helper binary's name.
const HelperName = "airlock-pkcs11"

func defaultHelper() string {
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), HelperName); fileExists(p) {
			return p
		}
	}
	if p, err := exec.LookPath(HelperName); err == nil {
		return p
	}
	return HelperName
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// LogValue and Format print no PIN.
func (p *Provider) LogValue() slog.Value {
	return slog.GroupValue(slog.String("module", p.cfg.Module), slog.String("token", p.cfg.TokenLabel), slog.String("pin", "REDACTED"))
}

// Format implements fmt.Formatter, so that no PIN is printed by accident.
func (p *Provider) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "pkcs11.Provider{module: %q, token: %q, pin: REDACTED}", p.cfg.Module, p.cfg.TokenLabel)
}

// Close stops the helper.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.h != nil {
		p.h.stop()
		p.h = nil
	}
	return nil
}

func labelPrefix(tenantID string) string { return "airlock/" + tenantID + "/" }

func aad(tenantID, label string) []byte { return []byte(aadPrefix + tenantID + "\x00" + label) }

// WrapKey implements keys.KeyProvider. A tenant's first key is made in the token on first use; a
// tenant whose key was revoked, or destroyed in the token, is refused (ErrPermissionDenied).
func (p *Provider) WrapKey(ctx context.Context, tenantID string, dek []byte) ([]byte, string, error) {
	if err := keys.CheckWrapArgs(ctx, tenantID, dek); err != nil {
		return nil, "", err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	tk := p.st.Tenants[tenantID]
	if tk != nil && tk.RevokedAt != nil {
		return nil, "", fmt.Errorf("wrap key: %w", keys.RevokedError(tenantID, ""))
	}
	if tk == nil || len(tk.Labels) == 0 {
		if _, err := p.newKeyLocked(ctx, tenantID); err != nil {
			return nil, "", fmt.Errorf("wrap key for tenant %s: %w", tenantID, p.keyErr(tenantID, "", err))
		}
		tk = p.st.Tenants[tenantID]
	}
	label := tk.Labels[len(tk.Labels)-1]
	resp, err := p.callLocked(ctx, Request{Op: OpEncrypt, Label: label, Data: dek, AAD: aad(tenantID, label)})
	if err != nil {
		return nil, "", fmt.Errorf("wrap key for tenant %s: %w", tenantID, p.keyErr(tenantID, label, err))
	}
	return resp.Data, label, nil
}

// UnwrapKey implements keys.KeyProvider.
func (p *Provider) UnwrapKey(ctx context.Context, tenantID, keyID string, wrapped []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := keys.ValidateTenantID(tenantID); err != nil {
		return nil, fmt.Errorf("unwrap key: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	tk := p.st.Tenants[tenantID]
	known := tk != nil && strings.HasPrefix(keyID, labelPrefix(tenantID))
	if known {
		known = false
		for _, l := range tk.Labels {
			known = known || l == keyID
		}
	}
	switch {
	case tk != nil && tk.RevokedAt != nil:
		return nil, fmt.Errorf("unwrap key: %w", keys.RevokedError(tenantID, keyID))
	case !known:
		return nil, fmt.Errorf("unwrap key: tenant %s has no key %q: %w", tenantID, keyID, errdefs.ErrNotFound)
	case len(wrapped) == 0:
		return nil, fmt.Errorf("unwrap key: malformed wrapped key: %w", errdefs.ErrInvalidArgument)
	}
	resp, err := p.callLocked(ctx, Request{Op: OpDecrypt, Label: keyID, Data: wrapped, AAD: aad(tenantID, keyID)})
	if err != nil {
		return nil, fmt.Errorf("unwrap key: %w", p.keyErr(tenantID, keyID, err))
	}
	return resp.Data, nil
}

// RevokeKey implements keys.Revoker: it destroys every key of the tenant in the token and records the
// revocation. It cannot be undone.
func (p *Provider) RevokeKey(ctx context.Context, tenantID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := keys.ValidateTenantID(tenantID); err != nil {
		return fmt.Errorf("revoke key: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	tk := p.st.Tenants[tenantID]
	if tk == nil {
		tk = &tenantKeys{}
	}
	if tk.RevokedAt == nil {
		now := time.Now().UTC()
		next := &tenantKeys{Labels: tk.Labels, RevokedAt: &now}
		p.st.Tenants[tenantID] = next
		if err := p.saveLocked(); err != nil {
			p.st.Tenants[tenantID] = tk
			return fmt.Errorf("revoke key of tenant %s: %w", tenantID, err)
		}
		tk = next
	}
	// Recorded first: even if the token cannot be reached now, Airlock uses the keys no more.
	for _, l := range tk.Labels {
		if _, err := p.callLocked(ctx, Request{Op: OpDestroy, Label: l}); err != nil {
			return fmt.Errorf("revoke key of tenant %s: destroy %s in the token: %w", tenantID, l, err)
		}
	}
	return nil
}

// RotateKey makes a new key in the token the tenant's current one and reports its label. Keys wrapped
// under older ones still unwrap until they are destroyed.
func (p *Provider) RotateKey(ctx context.Context, tenantID string) (string, error) {
	if err := keys.ValidateTenantID(tenantID); err != nil {
		return "", fmt.Errorf("rotate key: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if tk := p.st.Tenants[tenantID]; tk != nil && tk.RevokedAt != nil {
		return "", fmt.Errorf("rotate key: %w", keys.RevokedError(tenantID, ""))
	}
	label, err := p.newKeyLocked(ctx, tenantID)
	if err != nil {
		return "", fmt.Errorf("rotate key of tenant %s: %w", tenantID, p.keyErr(tenantID, "", err))
	}
	return label, nil
}

// Check reports whether the tenant's keys can be used now: nil, or the error a wrap or unwrap would
// get. Every key the tenant ever had must still be in the token. A tenant without a key yet is fine.
func (p *Provider) Check(ctx context.Context, tenantID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	tk := p.st.Tenants[tenantID]
	switch {
	case tk == nil || (len(tk.Labels) == 0 && tk.RevokedAt == nil):
		return nil
	case tk.RevokedAt != nil:
		return keys.RevokedError(tenantID, "")
	}
	// Every key of the tenant still needed, not only the current one: data keys wrapped under an older
	// one are lost with it.
	for _, label := range tk.Labels {
		if slices.Contains(tk.Retired, label) {
			continue
		}
		if _, err := p.callLocked(ctx, Request{Op: OpCheck, Label: label}); err != nil {
			return p.keyErr(tenantID, label, err)
		}
	}
	return nil
}

// RetireOldKeys implements keys.Retirer: every label but the current one is retired.
func (p *Provider) RetireOldKeys(ctx context.Context, tenantID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	tk := p.st.Tenants[tenantID]
	if tk == nil || len(tk.Labels) < 2 {
		return nil
	}
	old := *tk
	next := *tk
	next.Retired = slices.Clone(tk.Labels[:len(tk.Labels)-1])
	p.st.Tenants[tenantID] = &next
	if err := p.saveLocked(); err != nil {
		p.st.Tenants[tenantID] = &old
		return fmt.Errorf("retire old keys of tenant %s: %w", tenantID, err)
	}
	return nil
}

// newKeyLocked makes the tenant's next key in the token and records it.
func (p *Provider) newKeyLocked(ctx context.Context, tenantID string) (string, error) {
	old := p.st.Tenants[tenantID]
	next := &tenantKeys{}
	n := 1
	if old != nil {
		next.Labels = append(next.Labels, old.Labels...)
		next.Retired = slices.Clone(old.Retired)
		n = len(old.Labels) + 1
	}
	label := labelPrefix(tenantID) + strconv.Itoa(n)
	if _, err := p.callLocked(ctx, Request{Op: OpGenerate, Label: label}); err != nil {
		return "", err
	}
	next.Labels = append(next.Labels, label)
	p.st.Tenants[tenantID] = next
	if err := p.saveLocked(); err != nil {
		if old == nil {
			delete(p.st.Tenants, tenantID)
		} else {
			p.st.Tenants[tenantID] = old
		}
		_, _ = p.callLocked(ctx, Request{Op: OpDestroy, Label: label})
		return "", err
	}
	return label, nil
}

func (p *Provider) saveLocked() error {
	if err := os.MkdirAll(p.cfg.Dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(&p.st)
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(p.state, b, 0o600)
}

// keyErr turns a helper error about the tenant's key label into the provider's contract: a key missing
// from the token is revoked (ErrPermissionDenied); a token that cannot be reached is ErrUnavailable.
func (p *Provider) keyErr(tenantID, label string, err error) error {
	var he *helperError
	if errors.As(err, &he) {
		switch he.code {
		case CodeNotFound:
			return keys.DestroyedError(tenantID, label)
		case CodeInvalid:
			return fmt.Errorf("wrapped key does not authenticate for tenant %s key %s: %w", tenantID, label, errdefs.ErrInvalidArgument)
		}
	}
	if errors.Is(err, errdefs.ErrUnavailable) {
		return keys.UnreachableError(tenantID, err)
	}
	return err
}

type helperError struct {
	code, msg string
}

func (e *helperError) Error() string { return "pkcs11 helper: " + e.msg }

func (e *helperError) Unwrap() error {
	switch e.code {
	case CodeNotFound:
		return errdefs.ErrNotFound
	case CodeInvalid:
		return errdefs.ErrInvalidArgument
	case CodeExists:
		return errdefs.ErrAlreadyExists
	}
	return errdefs.ErrUnavailable
}

// callLocked sends one request to the helper (starting it if needed) and returns its answer. A helper
// that does not answer within the timeout, or dies, is stopped; the next call starts a new one.
func (p *Provider) callLocked(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	if p.h == nil {
		h, err := startHelper(p.cfg)
		if err != nil {
			return Response{}, err
		}
		p.h = h
	}
	resp, err := p.h.call(ctx, req, p.cfg.Timeout)
	if err != nil {
		p.h.stop()
		p.h = nil
		return Response{}, err
	}
	if resp.Error != "" {
		return resp, &helperError{code: resp.Code, msg: resp.Error}
	}
	return resp, nil
}

type helper struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	done chan struct{}
}

func startHelper(cfg Config) (*helper, error) {
	cmd := exec.Command(cfg.Helper)
	cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, cfg.Env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %v: %w", cfg.Helper, err, errdefs.ErrUnavailable)
	}
	h := &helper{cmd: cmd, in: in, out: bufio.NewReader(out), done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(h.done) }()
	line, err := json.Marshal(HelperConfig{Module: cfg.Module, TokenLabel: cfg.TokenLabel, PIN: cfg.PIN})
	if err != nil {
		h.stop()
		return nil, err
	}
	defer clear(line)
	if _, err := h.in.Write(append(line, '\n')); err != nil {
		h.stop()
		return nil, fmt.Errorf("pkcs11 helper: %v: %w", err, errdefs.ErrUnavailable)
	}
	ready, err := h.read(cfg.Timeout)
	if err != nil {
		h.stop()
		return nil, err
	}
	if ready.Error != "" {
		h.stop()
		return nil, &helperError{code: ready.Code, msg: ready.Error}
	}
	return h, nil
}

func (h *helper) call(ctx context.Context, req Request, timeout time.Duration) (Response, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return Response{}, err
	}
	if _, err := h.in.Write(append(b, '\n')); err != nil {
		return Response{}, fmt.Errorf("pkcs11 helper: %v: %w", err, errdefs.ErrUnavailable)
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = time.Until(d)
	}
	return h.read(timeout)
}

// read reads one answer, or fails after timeout (the caller then stops the helper).
func (h *helper) read(timeout time.Duration) (Response, error) {
	type result struct {
		line []byte
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		line, err := h.out.ReadBytes('\n')
		ch <- result{line, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return Response{}, fmt.Errorf("pkcs11 helper exited: %v: %w", r.err, errdefs.ErrUnavailable)
		}
		var resp Response
		if err := json.Unmarshal(r.line, &resp); err != nil {
			return Response{}, fmt.Errorf("pkcs11 helper: malformed answer: %w", errdefs.ErrUnavailable)
		}
		return resp, nil
	case <-time.After(timeout):
		return Response{}, fmt.Errorf("pkcs11 helper: no answer in %s: %w", timeout, errdefs.ErrUnavailable)
	}
}

func (h *helper) stop() {
	_ = h.in.Close()
	select {
	case <-h.done:
	case <-time.After(2 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.done
	}
}
