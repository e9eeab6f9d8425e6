package ddblock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

var exampleTables int

// exampleDynamoDB stands in for `dynamodb.NewFromConfig(cfg)`: a client of
// the test server, with a fresh lock table whose name it returns.
func exampleDynamoDB() (*dynamodb.Client, string) {
	ddb := ddbtest.SharedServer().Client(0)
	exampleTables++
	table := fmt.Sprintf("ExampleLocks%d_%d", exampleTables, time.Now().UnixNano())
	err := ddblock.CreateTable(context.Background(), ddb,
		ddblock.WithNamesFromOptions(ddblock.Options{TableName: table, PartitionKeyName: "lock_key", SortKeyName: "sort_key", TTLAttributeName: "expiry_time"}),
		ddblock.WithOnDemand(), ddblock.WithPollInterval(10*time.Millisecond))
	if err != nil && !errors.Is(err, ddblock.CodeTTLUnsupported) {
		log.Fatal(err)
	}
	return ddb, table
}

// Acquire a lock, work under it, release it.
func Example() {
	ctx := context.Background()
	ddb, table := exampleDynamoDB()

	client, err := ddblock.New(ddb, ddblock.WithTableName(table))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx, false)

	lock, err := client.AcquireLock(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(lock.ID(), lock.Status())

	// ... work; stop if lock.Done() closes ...

	if err := lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		log.Fatal(err)
	}
	fmt.Println(lock.Status())
	// Output:
	// nightly-report|- LOCKED
	// RELEASED
}

// WithLock is the Go form of Python's `with` block: the function's
// context is cancelled if the lock is lost, and its error is returned.
func ExampleClient_WithLock() {
	ctx := context.Background()
	ddb, table := exampleDynamoDB()
	client, err := ddblock.New(ddb, ddblock.WithTableName(table))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx, false)

	err = client.WithLock(ctx, "invoice-42", func(ctx context.Context, lock *ddblock.Lock) error {
		fmt.Println("working under", lock.PartitionKey())
		// Pass ctx to the work: it is cancelled the moment the lock is
		// stolen or in danger.
		return errors.New("payment service unavailable")
	})
	fmt.Println("WithLock:", err)
	// Output:
	// working under invoice-42
	// WithLock: payment service unavailable
}

// A lock held elsewhere makes a short acquire time out; GetLock says who
// holds it.
func ExampleClient_AcquireLock_timeout() {
	ctx := context.Background()
	ddb, table := exampleDynamoDB()
	holder, _ := ddblock.New(ddb, ddblock.WithTableName(table), ddblock.WithOwnerName("worker-1"))
	defer holder.Close(ctx, true)
	other, _ := ddblock.New(ddb, ddblock.WithTableName(table), ddblock.WithOwnerName("worker-2"))
	defer other.Close(ctx, true)

	if _, err := holder.AcquireLock(ctx, "leader"); err != nil {
		log.Fatal(err)
	}
	_, err := other.AcquireLock(ctx, "leader", ddblock.WithRetryTimeout(0))
	fmt.Println(errors.Is(err, ddblock.CodeAcquireTimeout))
	info, _ := other.GetLock(ctx, "leader", "")
	fmt.Println("held by", info.OwnerName, "for", info.LeaseDuration)
	// Output:
	// true
	// held by worker-1 for 30s
}

// A callback hears of danger, theft and recovery; Done and Err tell the
// same to code that watches the lock.
func ExampleWithCallback() {
	ctx := context.Background()
	ddb, table := exampleDynamoDB()
	// A heartbeat every second finds the theft below within a second;
	// the long safe period keeps a busy machine from putting the lock
	// in danger first.
	client, err := ddblock.New(ddb, ddblock.WithTableName(table),
		ddblock.WithHeartbeatPeriod(time.Second),
		ddblock.WithSafePeriod(20*time.Second),
		ddblock.WithLeaseDuration(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx, false)

	events := make(chan ddblock.Code, 4)
	lock, err := client.AcquireLock(ctx, "k", ddblock.WithCallback(func(code ddblock.Code, lock *ddblock.Lock) {
		events <- code
	}))
	if err != nil {
		log.Fatal(err)
	}

	// An operator removes the lock from under its holder.
	if err := client.ForceRelease(ctx, "k", "", lock.RecordVersionNumber()); err != nil {
		log.Fatal(err)
	}

	fmt.Println("callback:", <-events)
	<-lock.Done()
	fmt.Println("status:", lock.Status(), "stolen:", errors.Is(lock.Err(), ddblock.CodeLockStolen))
	// Output:
	// callback: LOCK_STOLEN
	// status: INVALID stolen: true
}

// Shut a client down with a deadline. Close keeps held locks unless told
// otherwise, as Python's close() does; a kept lock can still be released,
// here by a second Close that releases what the first kept.
func ExampleClient_Close() {
	ddb, table := exampleDynamoDB()
	client, err := ddblock.New(ddb, ddblock.WithTableName(table))
	if err != nil {
		log.Fatal(err)
	}
	lock, err := client.AcquireLock(context.Background(), "nightly-report")
	if err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Close(ctx, false); err != nil {
		// CANCELED: callbacks were still running when ctx ended.
		log.Print(err)
	}
	fmt.Println(lock.Status(), ddblock.CodeOf(lock.Err()))

	if err := client.Close(ctx, true); err != nil {
		log.Print(err)
	}
	fmt.Println(lock.Status(), ddblock.CodeOf(lock.Err()))
	// Output:
	// LOCKED CLIENT_SHUTDOWN
	// RELEASED LOCK_RELEASED
}
