// Package faultinject lets crash-safety tests kill the server at named points of multi-step work, as a
// power cut or kill -9 would. It is inert unless the environment variable AIRLOCK_CRASH_AT names a
// point; the tests that set it run airlock as a separate process.
package faultinject

import (
	"os"
	"syscall"
)

// EnvVar names the point at which Crash kills the process.
const EnvVar = "AIRLOCK_CRASH_AT"

var at = os.Getenv(EnvVar)

// Crash kills the process with SIGKILL (no deferred call, no cleanup) if point is the one EnvVar names.
func Crash(point string) {
	if at != "" && at == point {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not handled; wait for it
	}
}
