package cleanup

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCleanOrderAndRelease(t *testing.T) {
	var got []int
	c := Make(func() { got = append(got, 1) })
	c.Add(func() { got = append(got, 2) })
	c.Add(func() { got = append(got, 3) })
	c.Clean()
	if diff := cmp.Diff([]int{3, 2, 1}, got); diff != "" {
		t.Errorf("Clean order (-want +got):\n%s", diff)
	}
	c.Clean() // already empty: runs nothing
	if len(got) != 3 {
		t.Errorf("second Clean ran steps again: %v", got)
	}

	got = nil
	c = Make(func() { got = append(got, 1) })
	c.Release()
	c.Clean()
	if len(got) != 0 {
		t.Errorf("Clean after Release ran %v; want nothing", got)
	}
}
