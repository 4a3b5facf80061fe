// Package softhsm makes SoftHSM2 tokens for tests: a real PKCS#11 token in a temporary directory.
// Debian's softhsm2 and opensc (pkcs11-tool) packages provide what it runs; scripts/test.sh installs them.
package softhsm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Module is where Debian installs SoftHSM2's PKCS#11 module.
const Module = "/usr/lib/softhsm/libsofthsm2.so"

// Token is a SoftHSM2 token of its own.
type Token struct {
	Module string
	Label  string
	PIN    string
	// Env points SoftHSM2 at the token's configuration (SOFTHSM2_CONF=…).
	Env []string
}

// NewToken initializes a token in a temporary directory, removed when t ends. Without SoftHSM2 the
// test is skipped, except under CI (CI=true), where that is a failure.
func NewToken(t *testing.T) *Token {
	t.Helper()
	if _, err := os.Stat(Module); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("SoftHSM2 is missing (%v); scripts/test.sh installs Debian's softhsm2", err)
		}
		t.Skipf("SoftHSM2 is not installed (%s): apt-get install softhsm2 opensc", Module)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "softhsm2.conf")
	tokens := filepath.Join(dir, "tokens")
	if err := os.Mkdir(tokens, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, fmt.Appendf(nil, "directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n", tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	tok := &Token{Module: Module, Label: "airlock-test", PIN: "4711-test-pin", Env: []string{"SOFTHSM2_CONF=" + conf}}
	tok.run(t, "softhsm2-util", "--init-token", "--free", "--label", tok.Label, "--pin", tok.PIN, "--so-pin", "so-pin-0815")
	return tok
}

// DeleteKey destroys the secret key labelled label in the token with pkcs11-tool, as the token's owner
// would with their own tools.
func (tok *Token) DeleteKey(t *testing.T, label string) {
	t.Helper()
	tok.run(t, "pkcs11-tool", "--module", tok.Module, "--token-label", tok.Label, "--login", "--pin", tok.PIN,
		"--delete-object", "--type", "secrkey", "--label", label)
}

func (tok *Token) run(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), tok.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}
