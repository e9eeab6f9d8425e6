package ddblock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

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
	if _, err := migrations.TryAcquire(ctx); errors.Is(err, ddblock.ErrLockHeld) {
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
