package store

import "testing"

// Every write a lease holder makes carries the lease fence, and it is the
// fence the skiplock_seedbug build removes: if lease.sql changed shape, the
// seeded-bug test in test/faults would silently test nothing.
func TestEveryHolderWriteIsFenced(t *testing.T) {
	s := New("skiplock")
	for _, name := range []string{"heartbeat", "complete_delete", "complete_archive", "reschedule",
		"dead_letter", "complete_one_delete", "complete_one_archive", "complete_archive_result", "progress_write"} {
		fenced := leaseFence.MatchString(s.SQL(name))
		if fenced == seedBug {
			t.Errorf("query %s: fenced %v in a build with seedBug %v", name, fenced, seedBug)
		}
	}
}
