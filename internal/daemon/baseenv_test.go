package daemon

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBuildEnvWithBaseEnv(t *testing.T) {
	s := &server{cfg: Config{Env: []string{"PATH=/opt/bin", "HOME=/root", "USER=root", "GREETING=hi", "LANG=C.UTF-8"}}.withDefaults()}
	id := identity{name: "user", home: "/home/user"}
	got := s.buildEnv(id, []string{"GREETING=hello", "X=1"}, false)
	// The base env overrides PATH and adds its own; the user's identity stays; the request wins last.
	want := []string{"PATH=/opt/bin", "HOME=/home/user", "USER=user", "LOGNAME=user", "GREETING=hello", "LANG=C.UTF-8", "X=1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("buildEnv (-want +got):\n%s", diff)
	}
}
