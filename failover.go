package skiplock

import (
	"context"
	"fmt"
)

// LeaseTokensAdvance moves the lease-token sequence past every token a lost
// timeline could have handed out, and returns its new value. Run it once
// on the new primary right after a failover, before (or as soon as) workers
// claim there: from an HA manager's post-promotion hook, or with
// `skiplock failover advance-tokens`.
//
// Why: lease tokens come from a sequence, and a standby's copy of it lags
// the primary's. After a failover to an asynchronous standby the new
// primary hands out again the tokens of the commits it never received
// (beyond the 32 values a sequence is WAL-logged ahead), so a
// worker that held a lease on the old primary can meet a new lease with the
// same job, token and worker id, and pass the fence; external systems
// fencing on the token see it repeat or go backwards. The sequence is moved
// to the current time in microseconds, or a million past its own value when
// that is higher (never backwards, even with claims racing it and clocks
// that disagree), above anything the old primary handed out. With a synchronous standby every acknowledged
// claim is on the new primary and nothing is reissued; advancing is then
// harmless, so an HA hook can run it after every promotion.
func (c *Client) LeaseTokensAdvance(ctx context.Context) (int64, error) {
	v, err := c.store.AdvanceLeaseTokens(ctx, c.pool)
	if err != nil {
		return 0, fmt.Errorf("skiplock: advance lease tokens: %w", err)
	}
	return v, nil
}
