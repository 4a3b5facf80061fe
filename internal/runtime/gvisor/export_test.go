package gvisor

import "time"

// SetParkAfter sets how long a sandbox restored ahead stays unpaused, until the test ends.
func SetParkAfter(t interface{ Cleanup(func()) }, after time.Duration) {
	old := parkAfter
	parkAfter = after
	t.Cleanup(func() { parkAfter = old })
}
