package ddblock_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ddblock/ddblock"
)

// One service instance leads; the others wait in Campaign, reading only.
// The leader's work runs under the leadership's context, which ends the
// moment leadership is lost.
func ExampleElection() {
	ctx := context.Background()
	ddb, table := exampleDynamoDB()
	client, err := ddblock.New(ddb, ddblock.WithTableName(table), ddblock.WithOwnerName("host-a"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx, true)

	election, err := client.NewElection("billing-scheduler")
	if err != nil {
		log.Fatal(err)
	}
	lead, err := election.Campaign(ctx, "10.0.0.7:8080")
	if err != nil {
		log.Fatal(err)
	}
	// ... leader-only work under lead.Context() ...

	leader, err := election.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", leader.Owner, leader.Value)

	if err := election.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("leadership over:", lead.Context().Err() != nil)
	// Output:
	// leader: host-a 10.0.0.7:8080
	// leadership over: true
}

// A leader changes the value it publishes without giving up leadership:
// observers read the new value, and the leadership goes on.
func ExampleLeadership_Proclaim() {
	ctx := context.Background()
	ddb, table := exampleDynamoDB()
	client, err := ddblock.New(ddb, ddblock.WithTableName(table), ddblock.WithOwnerName("host-a"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx, true)

	election, err := client.NewElection("billing-scheduler")
	if err != nil {
		log.Fatal(err)
	}
	lead, err := election.Campaign(ctx, "10.0.0.7:8080")
	if err != nil {
		log.Fatal(err)
	}
	// The leader moved to another port.
	if err := lead.Proclaim(ctx, "10.0.0.7:9090"); err != nil {
		log.Fatal(err)
	}
	leader, err := election.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", leader.Owner, leader.Value)
	fmt.Println("still leading:", lead.Context().Err() == nil)
	// Output:
	// leader: host-a 10.0.0.7:9090
	// still leading: true
}
