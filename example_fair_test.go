package ddblock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ddblock/ddblock"
)

// Fair waiters take a lock in the order they came, through a line of
// tickets beside the lock (`ddblock get KEY` shows it). A client that
// has no business waiting any longer simply cancels: its place goes
// with it.
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
	time.Sleep(100 * time.Millisecond) // the holder works a while
	if err := held.Release(ctx); err != nil {
		log.Fatal(err)
	}
	lock := <-got
	fmt.Println(lock.OwnerName(), lock.Status())
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// waiter LOCKED
}
