package local_test

import (
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/internal/keys"
)

// BenchmarkUnwrap compares an unwrap from the keyring file (kept in memory) with one from the Store
// (a document read and opened on every call, so that revocations on other replicas hold at once).
func BenchmarkUnwrap(b *testing.B) {
	for _, tc := range []struct {
		name string
		new  func(b *testing.B) keys.KeyProvider
	}{
		{"file", func(b *testing.B) keys.KeyProvider {
			k, err := newFileKeyring(filepath.Join(b.TempDir(), "keys"))
			if err != nil {
				b.Fatal(err)
			}
			return k
		}},
		{"store", func(b *testing.B) keys.KeyProvider {
			k, err := newStoreKeyring(b)
			if err != nil {
				b.Fatal(err)
			}
			return k
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			k := tc.new(b)
			ctx := b.Context()
			dek := make([]byte, 32)
			w, id, err := k.WrapKey(ctx, "tn_bench", dek)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := k.UnwrapKey(ctx, "tn_bench", id, w); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
