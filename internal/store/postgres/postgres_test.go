package postgres

import (
	"context"
	"testing"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/storetest"
	"github.com/airlockrun/airlock/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func open(t *testing.T, dsn string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, pgtest.Start(t)) },
		storetest.WithReopen(func(t *testing.T, s store.Store) store.Store {
			dsn := s.(*Store).dsn
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			return open(t, dsn)
		}))
}
