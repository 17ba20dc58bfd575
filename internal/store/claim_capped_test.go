package store_test

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// Round-robin fair share: behind one tenant's burst (first in name order
// and in claim order), every one of 400 small tenants gets its first job
// within ceil(tenants / batch) capped claims, because each claim visits the
// next batch of tenants after the previous claim's cursor, wrapping around.
func TestCappedClaimServesEveryTenantInTurn(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	const small, batch = 400, 50
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, run_at)
		SELECT 'q', 'k', 'a-burst', now() - interval '2 hours' + g * interval '1 millisecond' FROM generate_series(1, 3000) AS g`)
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, run_at)
		SELECT 'q', 'k', 't' || lpad((g % $1)::text, 4, '0'), now() - interval '1 hour' + g * interval '1 millisecond'
		FROM generate_series(1, 2 * $1) AS g`, small)
	seed(t, db, `ANALYZE skiplock.jobs`)
	st := store.New("skiplock")
	cursor := map[string]string{}
	first := map[string]int{}
	claims := 0
	for len(first) < small && claims < 30 {
		claims++
		res, err := st.Claim(ctx, db.Pool, store.ClaimRequest{Strategy: store.ClaimCapped, Queues: []string{"q"}, Batch: batch,
			WorkerID: benchWorker, Lease: time.Minute, TenantCap: 1, TenantCursor: cursor})
		require.NoError(t, err)
		jobs := res.Jobs
		maps.Copy(cursor, res.Cursors)
		require.NotEmpty(t, jobs)
		for _, j := range jobs {
			if _, seen := first[j.Tenant]; !seen && j.Tenant != "a-burst" {
				first[j.Tenant] = claims
			}
		}
	}
	bound := (small + 1 + batch - 1) / batch // tenants ÷ batch, rounded up
	t.Logf("%d small tenants behind a burst of 3,000: all served within %d claims of %d (bound %d)", len(first), claims, batch, bound)
	require.Len(t, first, small)
	require.LessOrEqual(t, claims, bound+1)
}

// A visit reads the next tenants after the cursor in one pass of the tenant
// index where they hold few jobs and probes on from the last one it found
// where they hold many: either way, each claim (cap 1) takes one job from
// each of exactly the next batch tenants in name order that have ready
// jobs, wrapping around. Tenants of 1 to 400 jobs, mixed so that some
// visits find all their tenants in the one read, some few, and some none
// (a tenant of 400 jobs right after the cursor).
func TestCappedClaimVisitsTheNextTenantsWhateverTheirDepth(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	depths := []int{1, 3, 1, 2, 40, 1, 1, 5, 400, 1, 2, 1, 1, 90, 1, 3}
	const tenants, batch = 240, 20
	left := map[string]int{}
	var names []string
	for i := range tenants {
		name := fmt.Sprintf("t%04d", i)
		names = append(names, name)
		left[name] = depths[i%len(depths)]
		seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, priority, run_at)
			SELECT 'q', 'k', $1, g % 3, now() - interval '1 hour' + g * interval '1 millisecond' FROM generate_series(1, $2) AS g`,
			name, left[name])
	}
	seed(t, db, `ANALYZE skiplock.jobs`)
	st := store.New("skiplock")
	cursor := map[string]string{}
	for claim := 0; claim < 40; claim++ {
		// The next batch tenants with jobs after the cursor, wrapping.
		var want []string
		start := sort.SearchStrings(names, cursor["q"])
		if start < len(names) && names[start] == cursor["q"] {
			start++
		}
		for i := 0; i < len(names) && len(want) < batch; i++ {
			if n := names[(start+i)%len(names)]; left[n] > 0 {
				want = append(want, n)
			}
		}
		res, err := st.Claim(ctx, db.Pool, store.ClaimRequest{Strategy: store.ClaimCapped, Queues: []string{"q"}, Batch: batch,
			WorkerID: benchWorker, Lease: time.Minute, TenantCap: 1, TenantCursor: cursor})
		require.NoError(t, err)
		var got []string
		for _, j := range res.Jobs {
			got = append(got, j.Tenant)
			left[j.Tenant]--
		}
		sort.Strings(got)
		sorted := slices.Clone(want)
		sort.Strings(sorted)
		require.Equal(t, sorted, got, "claim %d after %q", claim, cursor["q"])
		require.Equal(t, want[len(want)-1], res.Cursors["q"], "claim %d: the cursor is the last tenant visited", claim)
		maps.Copy(cursor, res.Cursors)
		// The jobs finish (cap 1: a running job would hold its tenant back).
		seed(t, db, `DELETE FROM skiplock.jobs WHERE state = 'running'`)
	}
}

// With a cap above one, shares are taken in rounds: every visited tenant's
// first job before any tenant's second, so tenants whose jobs all have a
// lower priority than others' still get a job each turn. 30 tenants with
// 10 high-priority jobs each and 120 with 3 low-priority ones, batch 30,
// cap 3: every tenant has a job within ceil(150 / 30) = 5 claims. (Each
// tenant's jobs are consecutive in claim order: taken in claim order, the
// shares would give a batch to 10 tenants, 3 jobs each.)
func TestCappedClaimServesLowPriorityTenantsInTurn(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, priority)
		SELECT 'q', 'k', 'h' || lpad((g / 10)::text, 3, '0'), 5 FROM generate_series(0, 299) AS g`)
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, priority)
		SELECT 'q', 'k', 'l' || lpad((g / 3)::text, 3, '0'), 0 FROM generate_series(0, 359) AS g`)
	seed(t, db, `ANALYZE skiplock.jobs`)
	st := store.New("skiplock")
	cursor := map[string]string{}
	first := map[string]int{}
	claims := 0
	for len(first) < 150 && claims < 20 {
		claims++
		res, err := st.Claim(ctx, db.Pool, store.ClaimRequest{Strategy: store.ClaimCapped, Queues: []string{"q"}, Batch: 30,
			WorkerID: benchWorker, Lease: time.Minute, TenantCap: 3, TenantCursor: cursor})
		require.NoError(t, err)
		jobs := res.Jobs
		maps.Copy(cursor, res.Cursors)
		require.Len(t, jobs, 30)
		perTenant := map[string]int{}
		for _, j := range jobs {
			perTenant[j.Tenant]++
			if _, seen := first[j.Tenant]; !seen {
				first[j.Tenant] = claims
			}
		}
		require.Len(t, perTenant, 30, "claim %d: 30 visited tenants, one job each", claims)
	}
	require.Len(t, first, 150)
	require.LessOrEqual(t, claims, 5)
}

// The visit takes a tenant's first ready job as its share when that job
// can be claimed as it stands; when it cannot (its entity has a job
// running, it is of a kind the claimer does not take, it is not due yet),
// the tenant's next claimable job is its share instead: no tenant is held
// back by its first job.
func TestCappedClaimLooksPastAnUnclaimableFirstJob(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	// Each tenant's first job in claim order (priority 9) cannot be taken:
	// a: its entity is running; b: another kind; c: due in an hour. Their
	// second jobs (priority 0) can.
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, entity, state, locked_by, lease_token, lease_expires_at, attempts)
		VALUES ('q', 'k', 'z', 'busy', 'running', 'other', 1, now() + interval '1 hour', 1)`)
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, priority, entity, run_at) VALUES
		('q', 'k', 'a', 9, 'busy', now()), ('q', 'other', 'b', 9, NULL, now()), ('q', 'k', 'c', 9, NULL, now() + interval '1 hour'),
		('q', 'k', 'a', 0, NULL, now()), ('q', 'k', 'b', 0, NULL, now()), ('q', 'k', 'c', 0, NULL, now())`)
	st := store.New("skiplock")
	for _, tc := range []struct {
		name       string
		batch, cap int
	}{{"one share each", 3, 1}, {"more than one share", 10, 5}} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			jobs, err := claimJobs(ctx, st, tx, store.ClaimRequest{Strategy: store.ClaimCapped, Queues: []string{"q"}, Kinds: []string{"k"}, Batch: tc.batch,
				WorkerID: benchWorker, Lease: time.Minute, TenantCap: tc.cap, TenantCursor: map[string]string{}})
			require.NoError(t, err)
			got := map[string]int{}
			for _, j := range jobs {
				require.Equal(t, 0, j.Priority, "tenant %s's unclaimable first job was claimed", j.Tenant)
				got[j.Tenant]++
			}
			require.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, got)
		})
	}
}

// A capped claim takes at most one job per entity in a batch, whoever's
// turn and whichever read (shares, jobs without a tenant, spare capacity)
// found them: best keeps the first of each entity in its order, and the
// rows it locked are what the claim makes running (the capped claims have
// no second pick). Two of one entity would leave the second's update to
// the unique running index (an entity race, the claim retried).
func TestCappedClaimTakesOneJobPerEntity(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, priority, entity) VALUES
		('q', 'k', 'a', 3, 'e1'), ('q', 'k', 'a', 2, 'e1'), ('q', 'k', 'a', 1, 'e1'),
		('q', 'k', 'b', 2, 'e2'), ('q', 'k', 'b', 1, 'e2'), ('q', 'k', 'b', 0, NULL),
		('q', 'k', 'c', 0, NULL), ('q', 'k', 'c', 0, NULL),
		('q', 'k', NULL, 5, 'e3'), ('q', 'k', NULL, 4, 'e3')`)
	st := store.New("skiplock")
	for _, tc := range []struct {
		name             string
		batch, cap, want int // want: jobs claimed
	}{{"shares", 10, 5, 6}, {"one share each", 3, 1, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			jobs, err := claimJobs(ctx, st, tx, store.ClaimRequest{Strategy: store.ClaimCapped, Queues: []string{"q"}, Batch: tc.batch,
				WorkerID: benchWorker, Lease: time.Minute, TenantCap: tc.cap, TenantCursor: map[string]string{}})
			require.NoError(t, err)
			require.Len(t, jobs, tc.want)
			first := map[string]int{"e1": 3, "e2": 2, "e3": 5} // each entity's first job's priority
			perEntity := map[string]int{}
			for _, j := range jobs {
				if j.Entity != "" {
					perEntity[j.Entity]++
					require.Equal(t, first[j.Entity], j.Priority, "entity %s: not its first job in claim order", j.Entity)
				}
			}
			for e, n := range perEntity {
				require.Equal(t, 1, n, "entity %s: %d jobs in one batch", e, n)
			}
			require.Len(t, perEntity, 3, "each entity's first job has a share")
		})
	}
}

// A visit that stops at its first tenant because that tenant's weight
// fills the batch gives the tenant its whole round, though it is the only
// tenant visited: a tenant with weight 2 gets both jobs of a batch of 2,
// even with another tenant's jobs ahead of its second in claim order (the
// tenant visited alone because it is the only one with ready jobs leaves
// the rest to spare capacity instead).
func TestCappedClaimGivesAWeightedTenantItsRoundInASmallBatch(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	seed(t, db, `INSERT INTO skiplock.tenant_weights (queue, tenant, weight) VALUES ('q', 'a', 2)`)
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, priority) VALUES
		('q', 'k', 'a', 9), ('q', 'k', 'a', 0), ('q', 'k', 'b', 5), ('q', 'k', 'b', 5)`)
	st := store.New("skiplock")
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	jobs, err := claimJobs(ctx, st, tx, store.ClaimRequest{Strategy: store.ClaimCapped, Queues: []string{"q"}, Batch: 2,
		WorkerID: benchWorker, Lease: time.Minute, TenantCap: 1, TenantCursor: map[string]string{}})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	for _, j := range jobs {
		require.Equal(t, "a", j.Tenant, "the weight-2 tenant visited first has both jobs of its round")
	}
}

// The capped claim's cost does not grow with the number of ready tenants:
// it visits one batch of them per claim. Measured against the plain claim
// on the same table (logged; timings are not asserted, the plan shape is).
func TestCappedClaimCostWithManyTenants(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	const tenants = 20000
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, run_at)
		SELECT 'q', 'k', 'a-burst', now() - interval '2 hours' + g * interval '1 millisecond' FROM generate_series(1, 20000) AS g`)
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, run_at)
		SELECT 'q', 'k', 't' || lpad(g::text, 6, '0'), now() - interval '1 hour' + g * interval '1 millisecond'
		FROM generate_series(1, $1) AS g`, tenants)
	seed(t, db, `ANALYZE skiplock.jobs`)
	st := store.New("skiplock")
	measure := func(capped bool, cursor string) time.Duration {
		var best time.Duration
		for i := 0; i < 5; i++ {
			p := store.ClaimRequest{Queues: []string{"q"}, Batch: 50, WorkerID: benchWorker, Lease: time.Minute}
			if capped {
				p.Strategy, p.TenantCap, p.TenantCursor = store.ClaimCapped, 1, map[string]string{"q": cursor}
			}
			d := timedClaim(t, db, st, p, 50)
			if i == 0 || d < best {
				best = d
			}
		}
		return best
	}
	plain := measure(false, "")
	for _, cur := range []string{"", "t010000", "t019990"} {
		d := measure(true, cur)
		t.Logf("%d ready tenants: capped claim of 50 after cursor %q %v (best of 5), plain claim %v: %.1fx",
			tenants, cur, d.Round(time.Microsecond), plain.Round(time.Microsecond), float64(d)/float64(plain))
	}
}

// timedClaim times one claim, which must take want jobs, in a transaction
// it rolls back (the table is left as it was).
func timedClaim(t *testing.T, db *dbtest.DB, st *store.Store, p store.ClaimRequest, want int) time.Duration {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Rollback(ctx)) }()
	start := time.Now()
	jobs, err := claimJobs(ctx, st, tx, p)
	d := time.Since(start)
	require.NoError(t, err)
	require.Len(t, jobs, want)
	return d
}

func seed(t *testing.T, db *dbtest.DB, sql string, args ...any) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

// The capped claim against the plain one at 100,000 ready tenants with 3
// jobs each (what `skiplock bench --tenants 100000 --tenant-cap 5 --jobs
// 300000` seeds), cap 5, batch 50, interleaved, each rolled back; medians
// logged (SKIPLOCK_MEASURE=1 runs only: timings are not asserted).
func TestCappedClaimCostAt100kTenants(t *testing.T) {
	if os.Getenv("SKIPLOCK_MEASURE") == "" {
		t.Skip("set SKIPLOCK_MEASURE=1 to measure")
	}
	db := dbtest.New(t)
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, priority, tenant, run_at)
		SELECT 'q', 'k', g % 11, 't' || lpad((g % 100000)::text, 6, '0'), now() - interval '1 hour' + g * interval '1 millisecond'
		FROM generate_series(1, 300000) AS g`)
	seed(t, db, `VACUUM ANALYZE skiplock.jobs`)
	st := store.New("skiplock")
	var plain, capped []time.Duration
	cursors := []string{"", "t025000", "t050000", "t099990"}
	for i := 0; i < 40; i++ {
		for _, isCapped := range []bool{false, true} {
			p := store.ClaimRequest{Queues: []string{"q"}, Batch: 50, WorkerID: benchWorker, Lease: time.Minute}
			if isCapped {
				p.Strategy, p.TenantCap, p.TenantCursor = store.ClaimCapped, 5, map[string]string{"q": cursors[i%len(cursors)]}
			}
			d := timedClaim(t, db, st, p, 50)
			if isCapped {
				capped = append(capped, d)
			} else {
				plain = append(plain, d)
			}
		}
	}
	mp, mc := median(plain), median(capped)
	t.Logf("100,000 ready tenants, claim of 50: plain median %v, capped (cap 5) median %v: %.2fx",
		mp.Round(time.Microsecond), mc.Round(time.Microsecond), float64(mc)/float64(mp))
}

// A tenant of weight w takes w jobs per round of fair share where others
// take one, and up to w times the cap; a claim visits tenants until their
// weights fill the batch.
func TestCappedClaimHonoursTenantWeights(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant)
		SELECT 'many', 'k', 't' || lpad((g / 10)::text, 2, '0') FROM generate_series(0, 599) AS g`)
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant)
		SELECT 'few', 'k', 't' || (g / 20)::text FROM generate_series(0, 59) AS g`)
	seed(t, db, `ANALYZE skiplock.jobs`)
	require.NoError(t, st.SetTenantWeight(ctx, db.Pool, "many", "t00", 3))
	require.NoError(t, st.SetTenantWeight(ctx, db.Pool, "few", "t0", 3))
	claim := func(queue string, batch, cap int) map[string]int {
		jobs, err := claimJobs(ctx, st, db.Pool, store.ClaimRequest{Strategy: store.ClaimCapped, Queues: []string{queue}, Batch: batch,
			WorkerID: benchWorker, Lease: time.Minute, TenantCap: cap, TenantCursor: map[string]string{}})
		require.NoError(t, err)
		require.Len(t, jobs, batch)
		per := map[string]int{}
		for _, j := range jobs {
			per[j.Tenant]++
		}
		return per
	}
	// 60 tenants: t00 (weight 3) and the next 27 fill a batch of 30, one
	// round each.
	per := claim("many", 30, 2)
	require.Equal(t, 3, per["t00"], "%v", per)
	require.Len(t, per, 28, "%v", per)
	// 3 tenants, batch 10, cap 2: two rounds of 3 + 1 + 1.
	per = claim("few", 10, 2)
	require.Equal(t, map[string]int{"t0": 6, "t1": 2, "t2": 2}, per)

	ws, err := st.TenantWeights(ctx, db.Pool, "")
	require.NoError(t, err)
	require.Len(t, ws, 2)
	// Weight 1 is the default: it removes the row.
	require.NoError(t, st.SetTenantWeight(ctx, db.Pool, "few", "t0", 1))
	ws, err = st.TenantWeights(ctx, db.Pool, "few")
	require.NoError(t, err)
	require.Empty(t, ws)
}

// Where every visited tenant's first job is claimable as it stands, none
// weighs more than 1 and they fill the batch, the capped claim takes those
// first jobs in visit order without running the shares' rounds (capped_tail's
// firsts: the plan never executes candidates); a job without a tenant, a
// weighted tenant or a first job that cannot be taken sends it through the
// rounds, which give each its turn. Each case claims the same queue in a
// rolled-back transaction; the jobs are the ones the rounds gave before
// firsts existed.
func TestCappedClaimTakesTheVisitsFirstJobsWhereTheyFillTheBatch(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	// Ten tenants of three jobs of priorities 2, 1, 0. The cursor at t3 makes
	// the visit's tenants (t4 on) other than the queue's next jobs in claim
	// order (t0's to t3's first), which spare capacity would take.
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, priority, run_at)
		SELECT 'q', 'k', 't' || (g / 3)::text, 2 - g % 3, now() - interval '1 hour' + g * interval '1 second'
		FROM generate_series(0, 29) AS g`)
	seed(t, db, `ANALYZE skiplock.jobs`)
	// claim claims in a transaction after setup and rolls it back; rounds:
	// whether the same claim, explained after it in that transaction, ran
	// the shares' rounds (candidates executed).
	claim := func(setup string, rounds bool) []store.ClaimedJob {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		if setup != "" {
			_, err = tx.Exec(ctx, setup)
			require.NoError(t, err)
		}
		_, err = tx.Exec(ctx, "SAVEPOINT explained")
		require.NoError(t, err)
		for _, settings := range []string{"claim_settings", "claim_capped_settings"} {
			_, err = tx.Exec(ctx, st.SQL(settings))
			require.NoError(t, err)
		}
		plan := dbtest.Explain(t, tx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) "+st.SQL("claim_capped"),
			[]string{"q"}, []string(nil), 4, benchWorker, time.Minute.Microseconds(), 2, []string{"t3"})
		_, err = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT explained")
		require.NoError(t, err)
		lines := strings.Split(plan, "\n")
		i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "CTE candidates") })
		require.True(t, i >= 0 && i+1 < len(lines), plan)
		require.Equal(t, !rounds, strings.Contains(lines[i+1], "never executed"), "the rounds run: %v\n%s", rounds, plan)
		res, err := st.Claim(ctx, tx, store.ClaimRequest{Strategy: store.ClaimCapped, Queues: []string{"q"}, Batch: 4,
			WorkerID: benchWorker, Lease: time.Minute, TenantCap: 2, TenantCursor: map[string]string{"q": "t3"}})
		require.NoError(t, err)
		return res.Jobs
	}
	tenants := func(jobs []store.ClaimedJob) []string {
		var out []string
		for _, j := range jobs {
			out = append(out, fmt.Sprintf("%s/%d", cmp.Or(j.Tenant, "-"), j.Priority))
		}
		slices.Sort(out)
		return out
	}
	// The next four tenants after t3, each's first job (priority 2).
	require.Equal(t, []string{"t4/2", "t5/2", "t6/2", "t7/2"}, tenants(claim("", false)))
	// A job without a tenant has the first place of every round.
	require.Equal(t, []string{"-/0", "t4/2", "t5/2", "t6/2"},
		tenants(claim(`INSERT INTO skiplock.jobs (queue, kind, run_at) VALUES ('q', 'k', now() - interval '2 hours')`, true)))
	// A tenant of weight 2 has two jobs in the first round.
	require.Equal(t, []string{"t4/1", "t4/2", "t5/2", "t6/2"},
		tenants(claim(`INSERT INTO skiplock.tenant_weights (queue, tenant, weight) VALUES ('q', 't4', 2)`, true)))
	// A first job that cannot be taken yet (not due) leaves its tenant's
	// next one to the round.
	require.Equal(t, []string{"t4/1", "t5/2", "t6/2", "t7/2"},
		tenants(claim(`UPDATE skiplock.jobs SET run_at = now() + interval '1 hour' WHERE tenant = 't4' AND priority = 2`, true)))
}
