package pkcs11

// The helper protocol: the provider starts the helper (cmd/airlock-pkcs11) and writes one JSON line,
// a HelperConfig, to its stdin; then each request is a JSON line on stdin and each response a JSON line
// on stdout, in order. The helper holds the PKCS#11 session; the PIN never appears on a command line or
// in an environment.

// HelperConfig is the first line the helper reads.
type HelperConfig struct {
	Module     string `json:"module"`      // path of the PKCS#11 module (.so)
	TokenLabel string `json:"token_label"` // the token to use
	PIN        string `json:"pin"`         // the user PIN
}

// Ops of Request.
const (
	OpGenerate = "generate" // make an AES-256 key (sensitive, not extractable) with Label
	OpEncrypt  = "encrypt"  // AES-GCM-encrypt Data with AAD under the key Label; Data of the answer: nonce ‖ ciphertext
	OpDecrypt  = "decrypt"  // the inverse of OpEncrypt
	OpDestroy  = "destroy"  // destroy every object with Label in the token
	OpCheck    = "check"    // report whether a key with Label exists (not_found if not)
)

// Request is one call to the helper.
type Request struct {
	Op    string `json:"op"`
	Label string `json:"label"`
	Data  []byte `json:"data,omitempty"`
	AAD   []byte `json:"aad,omitempty"`
}

// Error codes of Response.
const (
	CodeNotFound    = "not_found"   // no key with the label
	CodeUnavailable = "unavailable" // the token or module failed
	CodeInvalid     = "invalid"     // the request is malformed, or the data does not authenticate
	CodeExists      = "already_exists"
)

// Response is the helper's answer to one Request.
type Response struct {
	Data  []byte `json:"data,omitempty"`
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
}
