package dashboard

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// panelTTL is how long a database's overview panels are served from its
// last read. Every open overview polls its panels every 5 s, and the
// panels' queries read the running set and the per-state counts, which a
// pinned vacuum horizon makes slower with every job processed since the pin
// (docs/performance.md: about 0.3 s for all of them 400,000 jobs into a
// pin) — exactly when several people have the dashboard open. With the
// cache the dashboard reads each database's panels at most once per
// panelTTL however many tabs poll, and concurrent requests share one read.
const panelTTL = 2 * time.Second

// panelCache holds each database's last overview read. An action (pause,
// cancel, replay, …) starts a new generation, so the next request after it
// reads afresh rather than show the state from before it.
type panelCache struct {
	mu    sync.Mutex
	gen   uint64
	byDB  map[int]cachedPanels
	group singleflight.Group
	reads int // loads run (tests)
}

type cachedPanels struct {
	at   time.Time
	gen  uint64
	data overviewData
}

// overviewFor returns sh's overview panels: the cached read when younger
// than panelTTL and no action came since, else a read shared with every
// request that asks meanwhile. The read does not end with the request that
// started it (the others wait for it); loadOverview bounds it by
// Options.QueryTimeout.
func (d *Dashboard) overviewFor(ctx context.Context, sh *shard) overviewData {
	c := &d.panels
	c.mu.Lock()
	if e, ok := c.byDB[sh.idx]; ok && e.gen == c.gen && time.Since(e.at) < panelTTL {
		c.mu.Unlock()
		return e.data
	}
	gen := c.gen
	c.mu.Unlock()
	v, _, _ := c.group.Do(fmt.Sprintf("%d/%d", sh.idx, gen), func() (any, error) {
		o := d.loadOverview(context.WithoutCancel(ctx), sh)
		c.mu.Lock()
		c.reads++
		if c.gen == gen {
			if c.byDB == nil {
				c.byDB = map[int]cachedPanels{}
			}
			c.byDB[sh.idx] = cachedPanels{at: time.Now(), gen: gen, data: o}
		}
		c.mu.Unlock()
		return o, nil
	})
	return v.(overviewData)
}

// invalidate makes the next request read every database's panels afresh.
func (c *panelCache) invalidate() {
	c.mu.Lock()
	c.gen++
	c.mu.Unlock()
}
