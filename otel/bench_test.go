package ddblockotel_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ddblock/ddblock"
	ddblockotel "github.com/ddblock/ddblock/otel"
)

// BenchmarkAcquireRelease is an uncontended AcquireLock and Release
// (doc/benchmarks.md): without the integration; with ddblock's metrics
// and spans on OpenTelemetry's SDK (every span sampled, batched to an
// exporter that drops them); and with the SDK client's DynamoDB spans
// too.
func BenchmarkAcquireRelease(b *testing.B) {
	table := newTable(b)
	setups := []struct {
		name     string
		ddblock  bool // ddblock's metrics and spans
		sdkSpans bool // the SDK's spans under them
	}{
		{"plain", false, false},
		{"otel", true, false},
		{"otel+sdk-spans", true, true},
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
		})
	}
}
