package ddblock_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ddblock/ddblock"
)

// Hold many locks for the cost of one: with session leases the client
// heartbeats one session item a period, not each lock. Here a worker
// owns 100 shards; its heartbeats cost one write a period all the same.
func ExampleWithSessionLease() {
	ctx := context.Background()
	ddb, table := exampleDynamoDB()

	client, err := ddblock.New(ddb, ddblock.WithTableName(table), ddblock.WithSessionLease())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx, true) // releases the shards, then ends the session

	var shards []*ddblock.Lock
	for i := range 100 {
		lock, err := client.AcquireLock(ctx, fmt.Sprintf("shard-%03d", i))
		if err != nil {
			log.Fatal(err)
		}
		shards = append(shards, lock)
	}
	// Every shard names the one session; if the session goes into danger
	// or is lost, so does every shard (Done, Err, Context, callbacks).
	same := true
	for _, l := range shards {
		same = same && l.SessionKey() == shards[0].SessionKey()
	}
	fmt.Println("shards held:", len(client.HeldLocks()), "on one session:", same)

	// Others see the session beside the lock.
	info, err := client.GetLock(ctx, "shard-007", "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("session lease:", info.Session.LeaseDuration, "session item present:", info.Session.Item != nil)
	// Output:
	// shards held: 100 on one session: true
	// session lease: 30s session item present: true
}
