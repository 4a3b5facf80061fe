//go:build race

package e2e

// raceDetector reports whether the tests run under the race detector.
const raceDetector = true
