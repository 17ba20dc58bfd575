package dashboard

import (
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// However many tabs poll the overview at once, the dashboard reads the
// database's panels once per panelTTL; an action makes the next request
// read afresh, so the panels show what it changed.
func TestOverviewPanelsAreReadOncePerTTL(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.seed()
	reads := func() int {
		f.d.panels.mu.Lock()
		defer f.d.panels.mu.Unlock()
		return f.d.panels.reads
	}

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			code, body := f.get("/overview/panels")
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, `id="panel-lag"`)
		})
	}
	wg.Wait()
	require.Equal(t, 1, reads(), "eight tabs at once: one read")
	code, _ := f.get("/")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 1, reads(), "within panelTTL: the same read")

	code, _, _ = f.do(http.MethodPost, "/queues/pause", url.Values{"queue": {"mail"}}, nil)
	require.Equal(t, http.StatusSeeOther, code)
	_, body := f.get("/overview/panels")
	require.Equal(t, 2, reads(), "after an action: read afresh")
	require.Contains(t, body, "paused")
}
