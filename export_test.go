package skiplock

// IdleFor reports whether one of c's worker pools waits idle for a job of
// queue and kind: an Enqueue of such a job by c now would be handed off
// (unless Config.NoHandOff or the job's options say otherwise). Tests wait
// for it instead of sleeping for the pool to park after its last claim or
// job, which a loaded machine can take far longer to do.
func IdleFor(c *Client, queue, kind string) bool {
	r := c.runner.Load()
	if r == nil {
		return false
	}
	o := r.Offer(queue, kind, false)
	if o == nil {
		return false
	}
	o.Release()
	return true
}
