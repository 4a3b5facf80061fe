// Command airlock-pkcs11 is Airlock's PKCS#11 helper: it holds a session with a customer's HSM (or KMS)
// through the HSM's PKCS#11 module, and encrypts and decrypts data keys with keys that never leave the
// token. Airlock's pkcs11 KeyProvider (internal/keys/pkcs11) starts it and speaks the line protocol
// described there; the module's C code runs in this process, not in Airlock's.
//
// It is the one part of Airlock built with cgo (the module is a shared library).
package main

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/ThalesGroup/crypto11"

	"github.com/airlockrun/airlock/internal/keys/pkcs11"
)

const nonceSize = 12

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "airlock-pkcs11 is started by Airlock and reads its configuration from stdin")
		os.Exit(2)
	}
	in := bufio.NewReader(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	line, err := in.ReadBytes('\n')
	if err != nil {
		fail("read configuration: %v", err)
	}
	var cfg pkcs11.HelperConfig
	if err := json.Unmarshal(line, &cfg); err != nil {
		fail("configuration: %v", err)
	}
	clear(line)
	ctx, err := crypto11.Configure(&crypto11.Config{Path: cfg.Module, TokenLabel: cfg.TokenLabel, Pin: cfg.PIN, GCMIVLength: nonceSize})
	cfg.PIN = ""
	if err != nil {
		// Say so on the protocol, so that the provider can report it as the key being unavailable.
		_ = out.Encode(pkcs11.Response{Error: "open token: " + err.Error(), Code: pkcs11.CodeUnavailable})
		os.Exit(1)
	}
	defer ctx.Close()
	_ = out.Encode(pkcs11.Response{}) // ready
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			return // the provider closed stdin
		}
		var req pkcs11.Request
		if err := json.Unmarshal(line, &req); err != nil {
			_ = out.Encode(pkcs11.Response{Error: "malformed request", Code: pkcs11.CodeInvalid})
			continue
		}
		_ = out.Encode(serve(ctx, req))
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "airlock-pkcs11: "+format+"\n", args...)
	os.Exit(1)
}

// serve answers one request. crypto11's GCM Seal panics on a token error; that becomes an answer.
func serve(ctx *crypto11.Context, req pkcs11.Request) (resp pkcs11.Response) {
	defer func() {
		if r := recover(); r != nil {
			resp = pkcs11.Response{Error: fmt.Sprint(r), Code: pkcs11.CodeUnavailable}
		}
	}()
	if req.Label == "" || len(req.Label) > 256 {
		return pkcs11.Response{Error: "label must be 1..256 bytes", Code: pkcs11.CodeInvalid}
	}
	label := []byte(req.Label)
	switch req.Op {
	case pkcs11.OpGenerate:
		if keys, err := ctx.FindKeys(nil, label); err != nil {
			return unavailable(err)
		} else if len(keys) > 0 {
			return pkcs11.Response{Error: "a key labelled " + req.Label + " exists", Code: pkcs11.CodeExists}
		}
		id := []byte(req.Label)
		if len(id) > 64 {
			id = id[len(id)-64:]
		}
		if _, err := ctx.GenerateSecretKeyWithLabel(id, label, 256, crypto11.CipherAES); err != nil {
			return unavailable(err)
		}
		return pkcs11.Response{}
	case pkcs11.OpDestroy:
		keys, err := ctx.FindKeys(nil, label)
		if err != nil {
			return unavailable(err)
		}
		for _, k := range keys {
			if err := k.Delete(); err != nil {
				return unavailable(err)
			}
		}
		return pkcs11.Response{}
	case pkcs11.OpCheck, pkcs11.OpEncrypt, pkcs11.OpDecrypt:
	default:
		return pkcs11.Response{Error: "unknown op " + req.Op, Code: pkcs11.CodeInvalid}
	}
	keys, err := ctx.FindKeys(nil, label)
	if err != nil {
		return unavailable(err)
	}
	if len(keys) == 0 {
		return pkcs11.Response{Error: "no key labelled " + req.Label + " in the token", Code: pkcs11.CodeNotFound}
	}
	if req.Op == pkcs11.OpCheck {
		return pkcs11.Response{}
	}
	aead, err := keys[0].NewGCM()
	if err != nil {
		return unavailable(err)
	}
	switch req.Op {
	case pkcs11.OpEncrypt:
		nonce := make([]byte, nonceSize)
		if _, err := rand.Read(nonce); err != nil {
			return unavailable(err)
		}
		return pkcs11.Response{Data: aead.Seal(nonce, nonce, req.Data, req.AAD)}
	default: // OpDecrypt
		if len(req.Data) < nonceSize+aead.Overhead() {
			return pkcs11.Response{Error: "ciphertext too short", Code: pkcs11.CodeInvalid}
		}
		pt, err := aead.Open(nil, req.Data[:nonceSize], req.Data[nonceSize:], req.AAD)
		if err != nil {
			if isAuthFailure(err) {
				return pkcs11.Response{Error: "ciphertext does not authenticate", Code: pkcs11.CodeInvalid}
			}
			return unavailable(err)
		}
		return pkcs11.Response{Data: pt}
	}
}

func unavailable(err error) pkcs11.Response {
	return pkcs11.Response{Error: err.Error(), Code: pkcs11.CodeUnavailable}
}

// isAuthFailure tells a tag mismatch (CKR_ENCRYPTED_DATA_INVALID, or the wrong length) from a token
// failure.
func isAuthFailure(err error) bool {
	var e interface{ Error() string }
	if errors.As(err, &e) {
		s := e.Error()
		return strings.Contains(s, "CKR_ENCRYPTED_DATA_INVALID") || strings.Contains(s, "CKR_ENCRYPTED_DATA_LEN_RANGE")
	}
	return false
}
