package health

import "sort"

// Add adds s, the same queue's figures in another database, to q: counts
// summed, the oldest ready age the largest, paused when paused in either.
// `stats`, `top` and the dashboard over several databases add up with it.
func (q *QueueStat) Add(s QueueStat) {
	q.Ready += s.Ready
	q.Scheduled += s.Scheduled
	q.Running += s.Running
	q.Dead += s.Dead
	q.OldestReadyAgeSeconds = max(q.OldestReadyAgeSeconds, s.OldestReadyAgeSeconds)
	q.Paused = q.Paused || s.Paused
}

// SumQueueStats adds several databases' queue stats up per queue (see
// QueueStat.Add), in queue name order like one database's; never nil.
func SumQueueStats(lists ...[]QueueStat) []QueueStat {
	byQueue := map[string]*QueueStat{}
	for _, l := range lists {
		for _, s := range l {
			t := byQueue[s.Queue]
			if t == nil {
				t = &QueueStat{Queue: s.Queue}
				byQueue[s.Queue] = t
			}
			t.Add(s)
		}
	}
	out := make([]QueueStat, 0, len(byQueue))
	for _, q := range byQueue {
		out = append(out, *q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Queue < out[j].Queue })
	return out
}

// SumUnhandledKinds adds several databases' unhandled kinds up per queue
// and kind (jobs summed, the oldest age the largest), most jobs first like
// one database's; never nil.
func SumUnhandledKinds(lists ...[]UnhandledKind) []UnhandledKind {
	type qk struct{ queue, kind string }
	by := map[qk]*UnhandledKind{}
	for _, l := range lists {
		for _, u := range l {
			t := by[qk{u.Queue, u.Kind}]
			if t == nil {
				t = &UnhandledKind{Queue: u.Queue, Kind: u.Kind}
				by[qk{u.Queue, u.Kind}] = t
			}
			t.Ready += u.Ready
			t.OldestReadyAgeSeconds = max(t.OldestReadyAgeSeconds, u.OldestReadyAgeSeconds)
		}
	}
	out := make([]UnhandledKind, 0, len(by))
	for _, u := range by {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Ready != out[j].Ready {
			return out[i].Ready > out[j].Ready
		}
		if out[i].Queue != out[j].Queue {
			return out[i].Queue < out[j].Queue
		}
		return out[i].Kind < out[j].Kind
	})
	return out
}
