package skiplock_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
)

type orderArgs struct {
	OrderID int64    `json:"order_id"`
	Items   []string `json:"items,omitempty"`
	Item    string   `json:"item,omitempty"`
}

// An order pipeline: charge the card (a checkpointed step), wait for the
// payment provider's webhook (a signal, here sent before the wait even
// begins: it is kept), fan out one shipping task per item at run time, and
// fan in to one notification that reads every shipment's output.
func ExampleClient_EnqueueWorkflow() {
	c, done := exampleClient(skiplock.Config{PollInterval: 20 * time.Millisecond})
	defer done()
	ctx := context.Background()

	_ = skiplock.Handle(c, "order.charge", func(ctx context.Context, j *skiplock.Job[orderArgs]) error {
		// Runs once, even if the job is retried after this point.
		charge, err := skiplock.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			return fmt.Sprintf("ch_%d", j.Args.OrderID), nil // call the payment API here
		})
		if err != nil {
			return err
		}
		// Sleeps in the table (no worker slot) until the webhook's signal.
		payment, err := skiplock.WaitSignal(ctx, "payment_confirmed", 24*time.Hour)
		if err != nil {
			return err
		}
		var p struct{ Amount int }
		_ = json.Unmarshal(payment, &p)
		return skiplock.SetOutput(ctx, map[string]any{"charge": charge, "amount": p.Amount})
	})
	_ = skiplock.Handle(c, "order.split", func(ctx context.Context, j *skiplock.Job[orderArgs]) error {
		var ships []skiplock.Task
		var names []string
		for _, item := range j.Args.Items {
			names = append(names, "ship-"+item)
			ships = append(ships, skiplock.Task{Name: "ship-" + item, Kind: "order.ship",
				Args: orderArgs{OrderID: j.Args.OrderID, Item: item}})
		}
		notify := skiplock.Task{Name: "notify", Kind: "order.notify", Args: orderArgs{OrderID: j.Args.OrderID},
			DependsOn: append(names, "charge")}
		return skiplock.AddTasks(ctx, append(ships, notify)...)
	})
	_ = skiplock.Handle(c, "order.ship", func(ctx context.Context, j *skiplock.Job[orderArgs]) error {
		return skiplock.SetOutput(ctx, "parcel-"+j.Args.Item)
	})
	_ = skiplock.Handle(c, "order.notify", func(ctx context.Context, j *skiplock.Job[orderArgs]) error {
		paid, err := skiplock.TaskOutput[map[string]any](ctx, "charge")
		if err != nil {
			return err
		}
		for _, item := range []string{"book", "lamp"} {
			parcel, err := skiplock.TaskOutput[string](ctx, "ship-"+item)
			if err != nil {
				return err
			}
			fmt.Println("shipped", parcel)
		}
		fmt.Println("charged", paid["charge"], "amount", paid["amount"])
		return nil
	})

	id, err := c.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "order", Tasks: []skiplock.Task{
		{Name: "charge", Kind: "order.charge", Args: orderArgs{OrderID: 7}},
		{Name: "split", Kind: "order.split", Args: orderArgs{OrderID: 7, Items: []string{"book", "lamp"}},
			DependsOn: []string{"charge"}},
	}})
	if err != nil {
		panic(err)
	}
	// The webhook handler, or SQL: SELECT skiplock.signal(name => 'payment_confirmed', workflow_id => ...).
	if _, err := c.SignalSend(ctx, "payment_confirmed", skiplock.SignalTarget{WorkflowID: id}, map[string]int{"amount": 1200}); err != nil {
		panic(err)
	}

	_ = c.Start(ctx)
	for {
		st, err := c.WorkflowGet(ctx, id, false)
		if err != nil {
			panic(err)
		}
		if st.State != "running" {
			fmt.Println("workflow", st.State, "tasks", st.Tasks)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Output:
	// shipped parcel-book
	// shipped parcel-lamp
	// charged ch_7 amount 1200
	// workflow completed tasks 5
}

// A nightly batch: 100 exports, and one callback once every one of them has
// finished (completed or dead), with the counts.
func ExampleClient_EnqueueBatch() {
	c, done := exampleClient(skiplock.Config{PollInterval: 20 * time.Millisecond})
	defer done()
	ctx := context.Background()

	type export struct {
		Account int `json:"account"`
	}
	_ = skiplock.Handle(c, "export", func(ctx context.Context, j *skiplock.Job[export]) error {
		if j.Args.Account%25 == 0 {
			return skiplock.Discard(fmt.Errorf("account %d is closed", j.Args.Account))
		}
		return nil
	})
	finished := make(chan skiplock.BatchCounts, 1)
	_ = skiplock.Handle(c, "export.report", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		counts, err := skiplock.BatchResult(ctx)
		if err != nil {
			return err
		}
		finished <- counts
		return nil
	})

	var members []skiplock.Task
	for i := 1; i <= 100; i++ {
		members = append(members, skiplock.Task{Name: fmt.Sprint("account-", i), Kind: "export", Args: export{Account: i}})
	}
	if _, err := c.EnqueueBatch(ctx, skiplock.Batch{Name: "nightly-export", Members: members,
		Callback: skiplock.Task{Kind: "export.report"}}); err != nil {
		panic(err)
	}
	_ = c.Start(ctx)
	counts := <-finished
	fmt.Printf("members %d, completed %d, dead %d\n", counts.Members, counts.Completed, counts.Dead)
	// Output:
	// members 100, completed 96, dead 4
}
