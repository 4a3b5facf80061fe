package pgtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// query runs sql on the database dsn names, through psql (which takes a DSN as its dbname), and returns
// the output, unaligned and without headers.
func query(t *testing.T, dsn, sql string) string {
	t.Helper()
	bin, _ := bindir()
	cmd := exec.Command(filepath.Join(bin, "psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-c", sql)
	cmd.Env = env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("psql -d %q -c %q: %v: %s", dsn, sql, err, out)
	}
	return strings.TrimSpace(string(out))
}

// dsnField returns the value of key in a DSN Start returned (unquoted values only).
func dsnField(t *testing.T, dsn, key string) string {
	t.Helper()
	for _, f := range strings.Fields(dsn) {
		if k, v, ok := strings.Cut(f, "="); ok && k == key {
			return v
		}
	}
	t.Fatalf("DSN %q has no %s", dsn, key)
	return ""
}

func TestStartGivesEachCallItsOwnDatabase(t *testing.T) {
	dsn1, dsn2 := Start(t), Start(t)
	db1, db2 := dsnField(t, dsn1, "dbname"), dsnField(t, dsn2, "dbname")
	if db1 == db2 {
		t.Fatalf("both Starts returned database %q; want two", db1)
	}
	if h1, h2 := dsnField(t, dsn1, "host"), dsnField(t, dsn2, "host"); h1 != h2 {
		t.Errorf("Starts in one test used servers %q and %q; want one shared", h1, h2)
	}
	for _, c := range []struct{ dsn, db string }{{dsn1, db1}, {dsn2, db2}} {
		if got := query(t, c.dsn, "SELECT current_database()"); got != c.db {
			t.Errorf("connected to %s: current_database() = %q; want %q", c.dsn, got, c.db)
		}
		if got := query(t, c.dsn, "SELECT count(*) FROM pg_database WHERE datname = '"+c.db+"'"); got != "1" {
			t.Errorf("pg_database rows named %s: %s; want 1", c.db, got)
		}
	}

	// The databases are separate: a table made in one is not in the other.
	query(t, dsn1, "CREATE TABLE only_here (x BIGINT)")
	if got := query(t, dsn2, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_here'"); got != "0" {
		t.Errorf("table made in %s visible in %s", db1, db2)
	}
	if got := query(t, dsn1, "SHOW fsync"); got != "off" {
		t.Errorf("fsync = %q; want off", got)
	}
}

func TestCleanupDropsDatabaseWhileServerIsShared(t *testing.T) {
	outer := Start(t)
	var inner string
	t.Run("inner", func(t *testing.T) {
		inner = dsnField(t, Start(t), "dbname")
	})
	if got := query(t, outer, "SELECT count(*) FROM pg_database WHERE datname = '"+inner+"'"); got != "0" {
		t.Errorf("database %s still exists after its test ended", inner)
	}
}

func TestLastUserStopsServer(t *testing.T) {
	if !Available() {
		t.Skip("needs PostgreSQL")
	}
	mu.Lock()
	busy := srv != nil
	mu.Unlock()
	if busy {
		t.Skip("another test holds the server")
	}

	var (
		smu sync.Mutex
		s   []*server
	)
	t.Run("group", func(t *testing.T) {
		for _, name := range []string{"a", "b", "c"} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				Start(t)
				mu.Lock()
				cur := srv
				mu.Unlock()
				smu.Lock()
				s = append(s, cur)
				smu.Unlock()
			})
		}
	})
	if len(s) != 3 {
		t.Fatalf("%d subtests recorded a server; want 3", len(s))
	}

	mu.Lock()
	left, n := srv, refs
	mu.Unlock()
	if left != nil || n != 0 {
		t.Errorf("after every user ended: server %v, %d references; want none", left, n)
	}
	seen := map[*server]bool{}
	for _, x := range s {
		seen[x] = true
	}
	for x := range seen {
		select {
		case <-x.exited:
		default:
			t.Errorf("server in %s still running", x.dir)
		}
		if _, err := os.Stat(x.dir); !os.IsNotExist(err) {
			t.Errorf("server directory %s: %v; want it removed", x.dir, err)
		}
	}
}
