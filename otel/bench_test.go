package ddblockotel_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ddblock/ddblock"
	ddblockotel "github.com/ddblock/ddblock/otel"
)

// BenchmarkAcquireRelease is an uncontended AcquireLock and Release
// (doc/benchmarks.md): with ddblock's metrics and spans on
// OpenTelemetry's SDK (every span sampled, batched to an exporter that
// drops them) and the SDK client's DynamoDB spans too; with ddblock's
// alone; and without the integration.
func BenchmarkAcquireRelease(b *testing.B) {
	table := newTable(b)
	warmUp(b, table)
	setups := []struct {
		name     string
		ddblock  bool // ddblock's metrics and spans
		sdkSpans bool // the SDK's spans under them
	}{
		// The integration first: a server still warming up would
		// slow it, not the baseline.
		{"otel+sdk-spans", true, true},
		{"otel", true, false},
		{"plain", false, false},
	}
	for _, s := range setups {
		b.Run(s.name, func(b *testing.B) {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			defer func() {
				_ = tp.Shutdown(context.Background())
				_ = mp.Shutdown(context.Background())
			}()
			tel, err := ddblockotel.New(ddblockotel.WithMeterProvider(mp), ddblockotel.WithTracerProvider(tp))
			if err != nil {
				b.Fatal(err)
			}
			var sdkOpts []func(*dynamodb.Options)
			if s.sdkSpans {
				sdkOpts = append(sdkOpts, func(o *dynamodb.Options) { o.TracerProvider = tel.TracerProvider() })
			}
			opts := []ddblock.Option{ddblock.WithTableName(table)}
			if s.ddblock {
				opts = append(opts, tel.ClientOptions()...)
			}
			c, err := ddblock.New(sdkClient(b, sdkOpts...), opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close(context.Background(), true)
			acquireReleaseLoop(b, c)
		})
	}
}

var warm sync.Once

// warmUp acquires and releases for a while before the first benchmark:
// a fresh server (a JVM most of all) runs slowly until it has compiled
// its hot paths, which would penalise whichever setup ran first.
func warmUp(b *testing.B, table string) {
	warm.Do(func() {
		c, err := ddblock.New(sdkClient(b), ddblock.WithTableName(table))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close(context.Background(), true)
		d := 5 * time.Second
		if server.Kind == "dynamodb-local" {
			d = 20 * time.Second
		}
		ctx := context.Background()
		for end := time.Now().Add(d); time.Now().Before(end); {
			l, err := c.AcquireLock(ctx, "warm-up")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// instantDDB answers every call of an acquire and a release at once,
// with success: with it, BenchmarkAcquireReleaseClientOnly measures the
// client's own work, which the server's time hides in
// BenchmarkAcquireRelease.
type instantDDB struct{ ddblock.DynamoDBAPI }

func (instantDDB) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return &dynamodb.PutItemOutput{}, nil
}

func (instantDDB) DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return &dynamodb.DeleteItemOutput{}, nil
}

// BenchmarkAcquireReleaseClientOnly is BenchmarkAcquireRelease's
// acquire and release against a DynamoDB that answers at once: the
// client's cost alone, without and with the integration.
func BenchmarkAcquireReleaseClientOnly(b *testing.B) {
	for _, withOtel := range []bool{false, true} {
		name := "plain"
		if withOtel {
			name = "otel"
		}
		b.Run(name, func(b *testing.B) {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			defer func() {
				_ = tp.Shutdown(context.Background())
				_ = mp.Shutdown(context.Background())
			}()
			tel, err := ddblockotel.New(ddblockotel.WithMeterProvider(mp), ddblockotel.WithTracerProvider(tp))
			if err != nil {
				b.Fatal(err)
			}
			var opts []ddblock.Option
			if withOtel {
				opts = tel.ClientOptions()
			}
			c, err := ddblock.New(instantDDB{}, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close(context.Background(), false)
			acquireReleaseLoop(b, c)
		})
	}
}

// acquireReleaseLoop is the measured loop: an uncontended AcquireLock
// and Release on c.
func acquireReleaseLoop(b *testing.B, c *ddblock.Client) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := c.AcquireLock(ctx, "acquire-release")
		if err != nil {
			b.Fatalf("AcquireLock: %v", err)
		}
		if err := l.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
			b.Fatalf("Release: %v", err)
		}
	}
}
