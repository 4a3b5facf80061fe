package node

import "time"

// SetWarmTimes shortens how long n's warm pool keeps a reservation and an idle kind's pool; call it
// before the first TakeWarm.
func SetWarmTimes(n *Local, hold, idle time.Duration) {
	n.warm.hold, n.warm.idle = hold, idle
}
