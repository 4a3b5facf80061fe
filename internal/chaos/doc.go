// Package chaos holds the chaos test (chaos_test.go): a small cluster of real processes under a seeded
// random schedule of faults, checked to lose nothing and to run nothing twice. It has a package of its
// own so that it runs apart from the end-to-end tests, within its own time limit. scripts/chaos.sh runs
// it, with a seed to replay or a duration to soak.
package chaos
