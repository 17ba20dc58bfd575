package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A request whose fields do not fit its strategy is refused before it
// reaches the database: a field the strategy ignores (a tenant cap on the
// plain claim, limits on the capped one) would be a decision silently not
// taken.
func TestClaimRequestFitsItsStrategy(t *testing.T) {
	bound := map[string]Bound{"q": {ID: 1}}
	tenantBound := map[string]map[string]Bound{"q": {"t": {ID: 1}}}
	for _, tc := range []struct {
		name string
		r    ClaimRequest
		ok   bool
	}{
		{"plain", ClaimRequest{}, true},
		{"plain after bounds", ClaimRequest{After: bound}, true},
		{"plain with a tenant cap", ClaimRequest{TenantCap: 2}, false},
		{"plain with limits", ClaimRequest{Limits: []string{"l"}}, false},
		{"within room", ClaimRequest{Strategy: ClaimWithinRoom, Limits: []string{"l"}, After: bound}, true},
		{"within room without limits", ClaimRequest{Strategy: ClaimWithinRoom}, false},
		{"limited", ClaimRequest{Strategy: ClaimLimited, Limits: []string{"l"}}, true},
		{"limited after bounds", ClaimRequest{Strategy: ClaimLimited, Limits: []string{"l"}, After: bound}, false},
		{"capped", ClaimRequest{Strategy: ClaimCapped, TenantCap: 1, TenantCursor: map[string]string{"q": "t"}}, true},
		{"capped without a cap", ClaimRequest{Strategy: ClaimCapped}, false},
		{"capped with tenant bounds", ClaimRequest{Strategy: ClaimCapped, TenantCap: 1, TenantAfter: tenantBound}, false},
		{"capped after", ClaimRequest{Strategy: ClaimCappedAfter, TenantCap: 1, TenantAfter: tenantBound}, true},
		{"capped after with limits", ClaimRequest{Strategy: ClaimCappedAfter, TenantCap: 1, Limits: []string{"l"}}, false},
		{"unknown", ClaimRequest{Strategy: ClaimCappedAfter + 1}, false},
	} {
		err := tc.r.check()
		if tc.ok {
			require.NoError(t, err, tc.name)
		} else {
			require.Error(t, err, tc.name)
		}
	}
	require.Equal(t, "claim_capped_after", ClaimCappedAfter.String())
}
