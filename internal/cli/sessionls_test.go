package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/sdk/go/airlock"
)

// TestSessionLsAndSnapshotsPage: session ls and session snapshots gather every page the API answers
// (following next_cursor), print them all, and send session ls's state filter on every page.
func TestSessionLsAndSnapshotsPage(t *testing.T) {
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.Path+"?"+r.URL.RawQuery)
		switch r.URL.Path + "?" + r.URL.Query().Get("cursor") {
		case "/v1/sessions?":
			writeJSON(w, http.StatusOK, airlock.SessionList{Sessions: []airlock.Session{{ID: "se_1", State: "running"}}, NextCursor: "c2"})
		case "/v1/sessions?c2":
			writeJSON(w, http.StatusOK, airlock.SessionList{Sessions: []airlock.Session{{ID: "se_2", State: "paused"}}})
		case "/v1/sessions/se_1/snapshots?":
			writeJSON(w, http.StatusOK, airlock.SnapshotList{Snapshots: []airlock.Snapshot{{ID: "sn_1"}, {ID: "sn_2"}}, NextCursor: "c2"})
		case "/v1/sessions/se_1/snapshots?c2":
			writeJSON(w, http.StatusOK, airlock.SnapshotList{Snapshots: []airlock.Snapshot{{ID: "sn_3"}}})
		default:
			writeErr(w, http.StatusNotFound, "not_found", r.URL.String())
		}
	}))
	defer srv.Close()

	code, out, errOut := run(t, srv.URL, "", "session", "ls", "--state", "running,paused")
	if code != 0 || !strings.Contains(out, "se_1") || !strings.Contains(out, "se_2") {
		t.Errorf("session ls: exit %d, stdout %q, stderr %q; want both pages' sessions", code, out, errOut)
	}
	wantQueries := []string{"/v1/sessions?state=running%2Cpaused", "/v1/sessions?cursor=c2&state=running%2Cpaused"}
	if diff := cmp.Diff(wantQueries, queries); diff != "" {
		t.Errorf("session ls requests (-want +got):\n%s", diff)
	}

	code, out, errOut = run(t, srv.URL, "", "--json", "session", "snapshots", "se_1")
	var l airlock.SnapshotList
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil {
		t.Fatalf("session snapshots --json: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var ids []string
	for _, sn := range l.Snapshots {
		ids = append(ids, sn.ID)
	}
	if diff := cmp.Diff([]string{"sn_1", "sn_2", "sn_3"}, ids); diff != "" {
		t.Errorf("session snapshots --json (-want +got):\n%s", diff)
	}

	code, _, errOut = run(t, srv.URL, "", "session", "snapshots", "se_nope")
	if code != 1 || !strings.Contains(errOut, "not_found") {
		t.Errorf("snapshots of a missing session: exit %d, stderr %q; want 1 and not_found", code, errOut)
	}
}
