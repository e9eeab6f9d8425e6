package ddblock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ddblock/ddblock"
)

// Fair waiters take a lock in the order they came; Line shows who waits,
// first in line first. A client that has no business waiting any longer
// simply cancels: its place goes with it.
func ExampleWithFairWaiting() {
	ctx := context.Background()
	ddb, table := exampleDynamoDB()
	holder, err := ddblock.New(ddb, ddblock.WithTableName(table), ddblock.WithOwnerName("holder"))
	if err != nil {
		log.Fatal(err)
	}
	defer holder.Close(ctx, true)
	waiter, err := ddblock.New(ddb, ddblock.WithTableName(table), ddblock.WithOwnerName("waiter"))
	if err != nil {
		log.Fatal(err)
	}
	defer waiter.Close(ctx, true)

	held, err := holder.AcquireLock(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	got := make(chan *ddblock.Lock)
	go func() {
		lock, err := waiter.AcquireLock(ctx, "nightly-report", ddblock.WithFairWaiting(),
			ddblock.WithRetryPeriod(50*time.Millisecond), ddblock.WithRetryTimeout(time.Minute))
		if err != nil {
			log.Fatal(err)
		}
		got <- lock
	}()
	for {
		line, err := holder.Line(ctx, "nightly-report", "")
		if err != nil {
			log.Fatal(err)
		}
		if len(line.Tickets) > 0 {
			fmt.Println("first in line:", line.Tickets[0].OwnerName)
			break
		}
		time.Sleep(10 * time.Millisecond) // until the waiter has come
	}
	if err := held.Release(ctx); err != nil {
		log.Fatal(err)
	}
	lock := <-got
	fmt.Println(lock.OwnerName(), lock.Status())
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	line, err := holder.Line(ctx, "nightly-report", "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("waiting after:", len(line.Tickets))
	// Output:
	// first in line: waiter
	// waiter LOCKED
	// waiting after: 0
}
