package skiplock_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/skiplock/skiplock"
)

// An application split by tenant across two databases runs one client per
// database and a Fleet over them: enqueues made outside a transaction go to
// the tenant's database, and each database's jobs run there. (Here the two
// "databases" are two schemas of one test database.)
func ExampleNewFleet() {
	ctx := context.Background()
	shard0, done0 := exampleClient(skiplock.Config{PollInterval: 50 * time.Millisecond})
	defer done0()
	shard1, done1 := exampleClient(skiplock.Config{PollInterval: 50 * time.Millisecond})
	defer done1()

	var mu sync.Mutex // guards ran
	ran := map[int]int{}
	all := make(chan struct{}, 3)
	for i, c := range []*skiplock.Client{shard0, shard1} {
		if err := skiplock.Handle(c, "invoice.send", func(context.Context, *skiplock.Job[struct{}]) error {
			mu.Lock()
			ran[i]++
			mu.Unlock()
			all <- struct{}{}
			return nil
		}); err != nil {
			panic(err)
		}
	}
	// Tenants a–m live in the first database, n–z in the second.
	route := func(p skiplock.EnqueueParams) int {
		if p.Tenant < "n" {
			return 0
		}
		return 1
	}
	fleet, err := skiplock.NewFleet([]*skiplock.Client{shard0, shard1}, route)
	if err != nil {
		panic(err)
	}
	for _, tenant := range []string{"acme", "zeta", "nova"} {
		r, err := fleet.Enqueue(ctx, skiplock.EnqueueParams{Kind: "invoice.send", Tenant: tenant})
		if err != nil {
			panic(err)
		}
		fmt.Println(tenant, "-> database", r.Database)
	}
	if err := fleet.Start(ctx); err != nil {
		panic(err)
	}
	for range 3 {
		<-all
	}
	if err := fleet.Stop(ctx); err != nil {
		panic(err)
	}
	fmt.Println("ran:", ran[0], "in the first,", ran[1], "in the second")
	// Output:
	// acme -> database 0
	// zeta -> database 1
	// nova -> database 1
	// ran: 1 in the first, 2 in the second
}
