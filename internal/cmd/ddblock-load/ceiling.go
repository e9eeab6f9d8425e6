package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/wire"
)

// keysPerWriter is how many items each ceiling writer cycles through.
// Every writer has keys of its own, as each lock has its own item.
const keysPerWriter = 16

// ceilingResult is the server's rate for one number of writers.
type ceilingResult struct {
	writers  int
	elapsed  time.Duration
	ok, fail int
	lat      durations
	cpu      cpuUse
}

func (r ceilingResult) rate() float64 { return float64(r.ok) / r.elapsed.Seconds() }

func (r ceilingResult) print(out io.Writer) {
	fmt.Fprintf(out, "%2d writers: %6.0f writes/s  (%d ok, %d failed in %v; latency p50 %v p99 %v max %v; CPU %s)\n",
		r.writers, r.rate(), r.ok, r.fail, r.elapsed.Round(time.Millisecond),
		r.lat.pct(50), r.lat.pct(99), r.lat.max(), r.cpu.String(r.elapsed))
}

// bestCeiling is the highest rate measured, the one heartbeat rates are
// read against.
func bestCeiling(cs []ceilingResult) float64 {
	best := 0.0
	for _, c := range cs {
		best = max(best, c.rate())
	}
	return best
}

// measureCeiling runs writers goroutines, each rewriting its own items
// with exactly the request a ddblock heartbeat sends (the same update and
// condition expressions), back to back for d.
func measureCeiling(ctx context.Context, ddb ddbClient, writers int, d time.Duration) (ceilingResult, error) {
	table, err := createTable(ctx, ddb, fmt.Sprintf("ceiling_%d", writers))
	if err != nil {
		return ceilingResult{}, err
	}
	defer deleteTable(ddb, table)

	// Seed the items, and their version numbers, before the clock starts.
	rvns := make([][]string, writers)
	for w := range writers {
		rvns[w] = make([]string, keysPerWriter)
		for k := range keysPerWriter {
			rvns[w][k] = wire.NewRecordVersionNumber()
			_, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{
				TableName: aws.String(table),
				Item: map[string]types.AttributeValue{
					ddblock.DefaultPartitionKeyName: &types.AttributeValueMemberS{Value: ceilingKey(w, k)},
					ddblock.DefaultSortKeyName:      &types.AttributeValueMemberS{Value: ddblock.DefaultSortKey},
					wire.AttrOwnerName:              &types.AttributeValueMemberS{Value: "ddblock-load"},
					wire.AttrLeaseDuration:          &types.AttributeValueMemberN{Value: "30"},
					wire.AttrRVN:                    &types.AttributeValueMemberS{Value: rvns[w][k]},
					ddblock.DefaultTTLAttributeName: &types.AttributeValueMemberN{Value: wire.Epoch(hourAhead())},
				},
			})
			if err != nil {
				return ceilingResult{}, fmt.Errorf("seeding: %w", err)
			}
		}
	}

	res := ceilingResult{writers: writers}
	var mu sync.Mutex
	var wg sync.WaitGroup
	cpu0 := readCPU()
	start := time.Now()
	deadline := start.Add(d)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ok, fail int
			lat := make(durations, 0, 4096)
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				k := i % keysPerWriter
				next := wire.NewRecordVersionNumber()
				t0 := time.Now()
				_, err := ddb.UpdateItem(ctx, heartbeatInput(table, ceilingKey(w, k), rvns[w][k], next))
				lat = append(lat, time.Since(t0))
				if err != nil {
					fail++
					continue
				}
				ok++
				rvns[w][k] = next
			}
			mu.Lock()
			res.ok += ok
			res.fail += fail
			res.lat = append(res.lat, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.cpu = readCPU().since(cpu0)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if res.ok == 0 {
		return res, errors.New("no write succeeded")
	}
	return res, nil
}

func ceilingKey(w, k int) string { return "ceiling-" + strconv.Itoa(w) + "-" + strconv.Itoa(k) }

// heartbeatInput is the UpdateItem a ddblock heartbeat sends, built by
// internal/wire as the library builds it, under the default attribute
// names.
func heartbeatInput(table, pk, oldRVN, newRVN string) *dynamodb.UpdateItemInput {
	t := wire.Table{Name: table, PK: ddblock.DefaultPartitionKeyName, SK: ddblock.DefaultSortKeyName, TTL: ddblock.DefaultTTLAttributeName}
	return t.Heartbeat(pk, ddblock.DefaultSortKey, oldRVN, newRVN, hourAhead(), time.Time{})
}

func hourAhead() time.Time { return time.Now().Add(time.Hour) }

// createTable creates a lock table of the default shape under a unique
// name. dynalite has no UpdateTimeToLive; that is expected.
func createTable(ctx context.Context, ddb ddbClient, what string) (string, error) {
	name := fmt.Sprintf("ddblock_load_%s_%d", what, time.Now().UnixNano())
	err := ddblock.CreateTable(ctx, ddb,
		ddblock.WithNamesFromOptions(ddblock.Options{
			TableName:        name,
			PartitionKeyName: ddblock.DefaultPartitionKeyName,
			SortKeyName:      ddblock.DefaultSortKeyName,
			TTLAttributeName: ddblock.DefaultTTLAttributeName,
		}),
		ddblock.WithOnDemand(), ddblock.WithPollInterval(10*time.Millisecond))
	if err != nil && !errors.Is(err, ddblock.CodeTTLUnsupported) {
		return "", fmt.Errorf("creating table %s: %w", name, err)
	}
	return name, nil
}

// deleteTable drops a table the tool made, best effort: a server the
// tool started goes away anyway.
func deleteTable(ddb ddbClient, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = ddb.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
}
