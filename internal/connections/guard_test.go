package connections

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/gateway/policy"
)

// TestGuardedClient: the providers' client checks the address it dials, whatever the URL named (a
// name that resolves, or is re-bound, to a guarded address): a loopback server is refused unless the
// operator opened loopback.
func TestGuardedClient(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	t.Cleanup(srv.Close)
	if _, err := guardedClient(nil).Get(srv.URL); err == nil || !strings.Contains(err.Error(), "guard:loopback") {
		t.Errorf("GET %s with no range opened: %v; want the dial refused by guard:loopback", srv.URL, err)
	}
	g, err := policy.NewGuards([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := guardedClient(g).Get(srv.URL)
	if err != nil {
		t.Fatalf("GET %s with loopback opened: %v", srv.URL, err)
	}
	resp.Body.Close()
}
