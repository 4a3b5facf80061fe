package cluster_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/errdefs"
)

// TestJoinTokenOptions: a token for more than one node names the IDs or a prefix they may join as, and
// only a token for one named ID, used once, may replace a node.
func TestJoinTokenOptions(t *testing.T) {
	ctx := t.Context()
	st := newStore(t)
	for name, tc := range map[string]struct {
		o        cluster.JoinTokenOptions
		wantUses int // 0: refused
	}{
		"default: one node, any ID":            {cluster.JoinTokenOptions{}, 1},
		"IDs: one use each":                    {cluster.JoinTokenOptions{NodeIDs: []string{"a", "b", "c"}}, 3},
		"IDs, fewer uses":                      {cluster.JoinTokenOptions{NodeIDs: []string{"a", "b", "c"}, Uses: 2}, 2},
		"a prefix, many uses":                  {cluster.JoinTokenOptions{NodePrefix: "k8s-", Uses: 50}, 50},
		"a prefix, default":                    {cluster.JoinTokenOptions{NodePrefix: "k8s-"}, 1},
		"a replace of one ID":                  {cluster.JoinTokenOptions{NodeIDs: []string{"node-a"}, Replace: true}, 1},
		"many uses, any ID":                    {cluster.JoinTokenOptions{Uses: 2}, 0},
		"more uses than IDs":                   {cluster.JoinTokenOptions{NodeIDs: []string{"a"}, Uses: 2}, 0},
		"IDs and a prefix":                     {cluster.JoinTokenOptions{NodeIDs: []string{"a"}, NodePrefix: "a"}, 0},
		"an ID twice":                          {cluster.JoinTokenOptions{NodeIDs: []string{"a", "a"}}, 0},
		"a bad ID":                             {cluster.JoinTokenOptions{NodeIDs: []string{"Node_A"}}, 0},
		"a bad prefix":                         {cluster.JoinTokenOptions{NodePrefix: "-x"}, 0},
		"negative uses":                        {cluster.JoinTokenOptions{Uses: -1}, 0},
		"too many uses":                        {cluster.JoinTokenOptions{NodePrefix: "x", Uses: cluster.MaxJoinTokenUses + 1}, 0},
		"a replace of any ID":                  {cluster.JoinTokenOptions{Replace: true}, 0},
		"a replace of two IDs":                 {cluster.JoinTokenOptions{NodeIDs: []string{"a", "b"}, Replace: true}, 0},
		"a replace by prefix":                  {cluster.JoinTokenOptions{NodePrefix: "a", Replace: true}, 0},
		"a replace of one ID, used twice":      {cluster.JoinTokenOptions{NodeIDs: []string{"a", "b"}, Uses: 2, Replace: true}, 0},
		"a description over 256 bytes":         {cluster.JoinTokenOptions{Description: strings.Repeat("x", 257)}, 0},
		"a prefix as long as an ID, or longer": {cluster.JoinTokenOptions{NodePrefix: strings.Repeat("x", 64)}, 0},
	} {
		t.Run(name, func(t *testing.T) {
			tc.o.TTL = time.Hour
			_, rec, err := cluster.CreateJoinToken(ctx, st, tc.o)
			if tc.wantUses == 0 {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("CreateJoinToken(%+v): %+v, %v; want ErrInvalidArgument", tc.o, rec, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("CreateJoinToken(%+v): %v", tc.o, err)
			}
			if rec.MaxUses() != tc.wantUses {
				t.Errorf("uses %d; want %d", rec.MaxUses(), tc.wantUses)
			}
		})
	}
}

// TestJoinTokenUses: a token joins each node once, at most its uses, only as the IDs it names; only a
// replace token replaces; of many joins with a single-use token at once, one goes through; a use given
// back can be taken again.
func TestJoinTokenUses(t *testing.T) {
	ctx := t.Context()
	st := newStore(t)
	mk := func(o cluster.JoinTokenOptions) string {
		t.Helper()
		o.TTL = time.Hour
		tok, _, err := cluster.CreateJoinToken(ctx, st, o)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	type use struct {
		id      string
		replace bool
		ok      bool
	}
	for name, tc := range map[string]struct {
		o    cluster.JoinTokenOptions
		uses []use
	}{
		"single use": {cluster.JoinTokenOptions{}, []use{
			{"node-a", false, true}, {"node-b", false, false}, {"node-a", false, false}}},
		"named IDs": {cluster.JoinTokenOptions{NodeIDs: []string{"node-a", "node-b"}}, []use{
			{"node-c", false, false}, {"node-a", false, true}, {"node-a", false, false}, {"node-b", false, true}}},
		"a prefix": {cluster.JoinTokenOptions{NodePrefix: "k8s-", Uses: 2}, []use{
			{"node-a", false, false}, {"k8s-a", false, true}, {"k8s-a", false, false}, {"k8s-b", false, true}, {"k8s-c", false, false}}},
		"no replace but with a replace token": {cluster.JoinTokenOptions{NodePrefix: "k8s-", Uses: 5}, []use{
			{"k8s-a", true, false}, {"k8s-a", false, true}}},
		"a replace token": {cluster.JoinTokenOptions{NodeIDs: []string{"node-a"}, Replace: true}, []use{
			{"node-b", true, false}, {"node-a", true, true}, {"node-a", true, false}}},
	} {
		t.Run(name, func(t *testing.T) {
			tok := mk(tc.o)
			for i, u := range tc.uses {
				_, err := cluster.UseJoinToken(ctx, st, tok, u.id, u.replace)
				if u.ok && err != nil {
					t.Fatalf("use %d (%s, replace %v): %v", i, u.id, u.replace, err)
				}
				if !u.ok && !errors.Is(err, errdefs.ErrPermissionDenied) {
					t.Fatalf("use %d (%s, replace %v): %v; want ErrPermissionDenied", i, u.id, u.replace, err)
				}
			}
		})
	}

	// A token made before uses were counted (no uses, no IDs in its record) joins one more node.
	legacy, legacyRec, err := cluster.CreateJoinToken(ctx, st, cluster.JoinTokenOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	d, err := st.GetDoc(ctx, "cluster/join/"+legacyRec.ID)
	if err != nil {
		t.Fatal(err)
	}
	var old map[string]any
	if err := json.Unmarshal(d.Value, &old); err != nil {
		t.Fatal(err)
	}
	delete(old, "uses")
	if d.Value, err = json.Marshal(old); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutDoc(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.UseJoinToken(ctx, st, legacy, "node-a", false); err != nil {
		t.Errorf("a token from before uses were counted: %v", err)
	}
	if _, err := cluster.UseJoinToken(ctx, st, legacy, "node-b", false); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a token from before uses were counted, a second node: %v; want ErrPermissionDenied", err)
	}

	// A wrong secret is refused.
	tok := mk(cluster.JoinTokenOptions{})
	rec, err := cluster.CheckJoinToken(ctx, st, tok)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.UseJoinToken(ctx, st, strings.Replace(tok, ".", ".x", 1), "node-a", false); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a wrong secret: %v; want ErrPermissionDenied", err)
	}
	// Of joins at once, one goes through (compare-and-swap on the token's record).
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won []string
	for i := range 8 {
		wg.Go(func() {
			id := "node-" + string(rune('a'+i))
			if _, err := cluster.UseJoinToken(ctx, st, tok, id, false); err == nil {
				mu.Lock()
				won = append(won, id)
				mu.Unlock()
			} else if !errors.Is(err, errdefs.ErrPermissionDenied) && !errors.Is(err, errdefs.ErrUnavailable) {
				t.Errorf("a join at once: %v", err)
			}
		})
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d joins with a single-use token went through at once (%v); want 1", len(won), won)
	}
	list, err := cluster.ListJoinTokens(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(list, func(l cluster.JoinToken) bool { return l.ID == rec.ID })
	if i < 0 || !cmp.Equal(list[i].Joined, won) {
		t.Fatalf("the token's record: %+v; want joined %v", list, won)
	}
	// A join that did not go through gives its use back; the token joins one node again.
	if err := cluster.ReleaseJoinToken(ctx, st, rec.ID, won[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.UseJoinToken(ctx, st, tok, "node-z", false); err != nil {
		t.Errorf("a use given back: %v", err)
	}
	if _, err := cluster.UseJoinToken(ctx, st, tok, "node-y", false); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a use past the one given back: %v; want ErrPermissionDenied", err)
	}
	if err := cluster.DeleteJoinToken(ctx, st, rec.ID); err != nil {
		t.Fatal(err)
	}
	if err := cluster.ReleaseJoinToken(ctx, st, rec.ID, "node-z"); err != nil {
		t.Errorf("giving back a use of a revoked token: %v; want nil", err)
	}
}
