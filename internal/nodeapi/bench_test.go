package nodeapi_test

import (
	"testing"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/nodecontract"
)

// BenchmarkPing compares a round trip to a sandbox's daemon through the node API (mutual TLS, the
// node's Mux) with one through the Mux on the node itself.
func BenchmarkPing(b *testing.B) {
	for _, via := range []string{"node-api", "on-node"} {
		b.Run(via, func(b *testing.B) {
			fn, c, _, _ := setup(b)
			ctx := b.Context()
			var l *link.Client
			var err error
			if via == "node-api" {
				l, err = c.Link(ctx, "sb_1")
			} else {
				l, err = fn.Link(ctx, "sb_1")
			}
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if err := l.Ping(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCreateCall measures a unary call's round trip (a create on a node that does nothing).
func BenchmarkCreateCall(b *testing.B) {
	_, c, _, _ := setup(b)
	ctx := b.Context()
	for b.Loop() {
		if err := c.CreateSandbox(ctx, nodecontract.CreateRequest{ID: "sb_b", TenantID: "tn_1", Template: "default"}); err != nil {
			b.Fatal(err)
		}
	}
}
