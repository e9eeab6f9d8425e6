package ddblockotel_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ddblock/ddblock"
	ddblockotel "github.com/ddblock/ddblock/otel"
)

// A service's setup: ddblock's metrics exported to Prometheus, its
// spans (and the SDK's DynamoDB spans under them) to the service's
// tracer provider.
func Example_prometheus() {
	ctx := context.Background()
	cfg := exampleConfig() // a program: config.LoadDefaultConfig(ctx)
	table := exampleTable(cfg)

	// The service's OpenTelemetry providers: metrics read by Prometheus
	// (served at /metrics), spans to the service's exporter.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	tp := sdktrace.NewTracerProvider() // sdktrace.WithBatcher(yourExporter)
	mux := http.NewServeMux()          // the service's
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	// The three lines.
	tel, err := ddblockotel.New(ddblockotel.WithMeterProvider(mp), ddblockotel.WithTracerProvider(tp))
	if err != nil {
		log.Fatal(err)
	}
	ddb := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.TracerProvider = tel.TracerProvider() })
	client, err := ddblock.New(ddb, append(tel.ClientOptions(), ddblock.WithTableName(table))...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx, true)

	lock, err := client.AcquireLock(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}

	// What Prometheus scrapes now.
	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "ddblock_") {
			fmt.Println(f.GetName(), f.GetType())
		}
	}
	// Output:
	// ddblock_acquire_attempts HISTOGRAM
	// ddblock_acquire_duration_seconds HISTOGRAM
	// ddblock_lock_held GAUGE
	// ddblock_lock_hold_duration_seconds HISTOGRAM
}
