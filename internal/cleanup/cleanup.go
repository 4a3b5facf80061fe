// Package cleanup is a stack of undo steps for multi-step lifecycle code, so that a half-finished operation
// undoes itself: build it with Make/Add as each step succeeds, and call Release once the whole operation
// has succeeded. Clean runs the steps in reverse order unless Release was called.
//
//	c := cleanup.Make(func() { os.RemoveAll(dir) })
//	defer c.Clean()
//	... more steps, each followed by c.Add(undo) ...
//	c.Release()
package cleanup

// Cleanup holds undo steps. The zero value is ready to use.
type Cleanup struct {
	steps []func()
}

// Make returns a Cleanup holding f.
func Make(f func()) Cleanup { return Cleanup{steps: []func(){f}} }

// Add pushes f; it runs before every step added earlier.
func (c *Cleanup) Add(f func()) { c.steps = append(c.steps, f) }

// Clean runs the steps in reverse order, unless Release was called, and empties the stack.
func (c *Cleanup) Clean() {
	for i := len(c.steps) - 1; i >= 0; i-- {
		c.steps[i]()
	}
	c.steps = nil
}

// Release drops every step: the operation succeeded and nothing is to be undone.
func (c *Cleanup) Release() { c.steps = nil }
