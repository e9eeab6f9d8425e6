package ddblock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/ddblock/ddblock"
)

// At most two migrations run at once across the fleet: each host takes
// one of the semaphore's two slots for the length of its migration. A
// held slot is an ordinary lock: heartbeated, with Done and Context.
func ExampleSemaphore() {
	ctx := context.Background()
	ddb, table := exampleDynamoDB()
	client, err := ddblock.New(ddb, ddblock.WithTableName(table), ddblock.WithOwnerName("host-a"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx, true)

	migrations, err := client.NewSemaphore("migrations", 2)
	if err != nil {
		log.Fatal(err)
	}
	first, err := migrations.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	second, err := migrations.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	slotA, _ := migrations.SlotOf(first)
	slotB, _ := migrations.SlotOf(second)
	fmt.Println("slots held:", min(slotA, slotB), max(slotA, slotB))

	// A third would wait; TryAcquire says at once that none is free.
	if _, err := migrations.TryAcquire(ctx); errors.Is(err, ddblock.CodeLockHeld) {
		fmt.Println("third: every slot is held")
	}
	// ... migrate under first.Context(ctx) ...
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}
	third, err := migrations.TryAcquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	slotC, _ := migrations.SlotOf(third)
	fmt.Println("third got the freed slot:", slotC == slotA)

	// A client that believes in another number of slots is refused.
	wrong, err := client.NewSemaphore("migrations", 5)
	if err != nil {
		log.Fatal(err)
	}
	_, err = wrong.TryAcquire(ctx)
	fmt.Println(ddblock.CodeOf(err))
	// Output:
	// slots held: 0 1
	// third: every slot is held
	// third got the freed slot: true
	// SEMAPHORE_MISMATCH
}

// An operator lowers a semaphore from 3 slots to 2 while slot 2 is held.
// The new number is in force at once for new holders; Resize returns
// once the holder of slot 2, which keeps its slot until then, released
// it: from then on at most 2 hold, whatever number the clients asked for.
func ExampleSemaphore_Resize() {
	ctx := context.Background()
	ddb, table := exampleDynamoDB()
	client, err := ddblock.New(ddb, ddblock.WithTableName(table), ddblock.WithOwnerName("operator"),
		ddblock.WithHeartbeatPeriod(100*time.Millisecond)) // Resize looks again every heartbeat period
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx, true)

	pool, err := client.NewSemaphore("reindex", 3)
	if err != nil {
		log.Fatal(err)
	}
	var top *ddblock.Lock
	for range 3 {
		lock, err := pool.Acquire(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if slot, _ := pool.SlotOf(lock); slot == 2 {
			top = lock
		}
	}

	resized := make(chan error, 1)
	go func() { resized <- pool.Resize(ctx, 2) }()
	// ... slot 2's holder finishes its work in its own time ...
	if err := top.Release(ctx); err != nil {
		log.Fatal(err)
	}
	if err := <-resized; err != nil {
		log.Fatal(err)
	}
	info, err := client.GetSemaphore(ctx, "reindex")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Slots, "slots,", len(info.Holders), "held,", info.Resizes, "resize")

	// A client still configured with 3 follows the new number.
	old, err := client.NewSemaphore("reindex", 3)
	if err != nil {
		log.Fatal(err)
	}
	_, err = old.TryAcquire(ctx)
	fmt.Println(ddblock.CodeOf(err), old.Slots())
	// Output:
	// 2 slots, 2 held, 1 resize
	// LOCK_HELD 2
}
