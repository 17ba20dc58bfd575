package health

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSumQueueStatsAndUnhandledKinds(t *testing.T) {
	a := []QueueStat{{Queue: "mail", Ready: 2, Scheduled: 1, Running: 3, Dead: 1, OldestReadyAgeSeconds: 5}}
	b := []QueueStat{{Queue: "bulk", Ready: 7}, {Queue: "mail", Ready: 4, Dead: 2, OldestReadyAgeSeconds: 9, Paused: true}}
	assert.Equal(t, []QueueStat{
		{Queue: "bulk", Ready: 7},
		{Queue: "mail", Ready: 6, Scheduled: 1, Running: 3, Dead: 3, OldestReadyAgeSeconds: 9, Paused: true},
	}, SumQueueStats(a, b))
	assert.Equal(t, []QueueStat{}, SumQueueStats())

	u := SumUnhandledKinds(
		[]UnhandledKind{{Queue: "q", Kind: "x", Ready: 1, OldestReadyAgeSeconds: 3}, {Queue: "q", Kind: "y", Ready: 2}},
		[]UnhandledKind{{Queue: "q", Kind: "x", Ready: 4, OldestReadyAgeSeconds: 1}},
	)
	assert.Equal(t, []UnhandledKind{{Queue: "q", Kind: "x", Ready: 5, OldestReadyAgeSeconds: 3}, {Queue: "q", Kind: "y", Ready: 2}}, u)
}
