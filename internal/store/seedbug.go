//go:build skiplock_seedbug

package store

// This file exists only for the fault suite's seeded-bug test
// (test/faults TestSeededBugIsCaught): built with the skiplock_seedbug tag,
// heartbeats, completions and retries lose their lease fence, so a worker
// that lost its lease still writes. The checker must catch it. Never build
// a program for use with this tag.
func init() { seedBug = true }
