package ddblock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
)

// limiterWatch sits first in the throttle classifiers of the SDK's
// adaptive retry mode. The mode consults them only when it updates its
// client-side rate limiter, once an attempt, through the release function
// of the attempt token it hands out (aws.RetryerV2's GetAttemptToken): so
// seen counts the attempts the rate limiter learnt of. It answers
// "unknown", leaving the decision to the SDK's own classifiers.
type limiterWatch struct {
	seen, throttled atomic.Int64
}

var defaultThrottles = retry.IsErrorThrottles(retry.DefaultThrottles)

func (w *limiterWatch) IsErrorThrottle(err error) aws.Ternary {
	w.seen.Add(1)
	if defaultThrottles.IsErrorThrottle(err) == aws.TrueTernary {
		w.throttled.Add(1)
	}
	return aws.UnknownTernary
}

// fastRetries is a retry setting that retries at once (1 ms backoff), so
// that tests do not wait through the SDK's backoff.
func fastRetries(attempts int) func(*retry.StandardOptions) {
	return func(so *retry.StandardOptions) {
		so.MaxAttempts = attempts
		so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
	}
}

// clientWithRetryer is an SDK client for endpoint (a fault proxy in front
// of the test server) that retries with r.
func clientWithRetryer(t *testing.T, endpoint string, r aws.Retryer) *dynamodb.Client {
	t.Helper()
	o := ddbtest.Shared(t).ClientFor(endpoint, 0).Options()
	o.RetryMaxAttempts = 0 // r says it
	o.Retryer = r
	return dynamodb.New(o)
}

// adaptiveClient is an SDK client in adaptive retry mode that reports its
// rate limiter's updates to w. Only the rate limiter paces its retries.
func adaptiveClient(t *testing.T, endpoint string, w *limiterWatch) *dynamodb.Client {
	t.Helper()
	return clientWithRetryer(t, endpoint, retry.NewAdaptiveMode(func(ao *retry.AdaptiveModeOptions) {
		ao.Throttles = append([]retry.IsErrorThrottle{w}, ao.Throttles...)
		ao.StandardOptions = append(ao.StandardOptions, fastRetries(5))
	}))
}

// With WithMetrics, the SDK's adaptive retry mode works as without it:
// its rate limiter learns of every attempt (it did of none while the
// metrics wrapped the retryer and hid its RetryerV2 side), and the client
// still counts each throttled attempt once.
func TestMetricsKeepAdaptiveRetries(t *testing.T) {
	e := newEnv(t)
	srv := ddbtest.Shared(t)
	ctx := context.Background()

	// What one acquire through a throttled attempt looked like.
	type outcome struct {
		Attempts, Injected           int64 // as the proxy counted them
		LimiterSaw, LimiterThrottled int64 // as the adaptive rate limiter learnt of them
		Counted                      int   // CallThrottled("PutItem"), with metrics on
	}
	run := func(t *testing.T, key string, withMetrics bool) outcome {
		p, err := faultproxy.Start(srv.Endpoint)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		var w limiterWatch
		var m metricsLog
		opts := []ddblock.Option{ddblock.WithClock(fakeClock())}
		if withMetrics {
			opts = append(opts, ddblock.WithMetrics(&m))
		}
		c := e.clientOn(adaptiveClient(t, p.URL(), &w), opts...)
		// One throttle: the rate limiter then holds the retry back until
		// it has a token, about a second or two.
		p.MustInject(faultproxy.Rule{Kind: faultproxy.Throttling, Op: "PutItem", Count: 1})
		if _, err := c.TryAcquireLock(ctx, key); err != nil {
			t.Fatalf("acquire through a throttled attempt: %v", err)
		}
		counts := p.Counts()
		return outcome{
			Attempts:         counts.ByOp["PutItem"],
			Injected:         counts.Faults(),
			LimiterSaw:       w.seen.Load(),
			LimiterThrottled: w.throttled.Load(),
			Counted:          m.get("throttled PutItem"),
		}
	}

	want := outcome{Attempts: 2, Injected: 1, LimiterSaw: 2, LimiterThrottled: 1}
	without := run(t, "without-metrics", false)
	if diff := cmp.Diff(want, without); diff != "" {
		t.Fatalf("without metrics (-want +got):\n%s", diff)
	}
	with := run(t, "with-metrics", true)
	want.Counted = 1
	if diff := cmp.Diff(want, with); diff != "" {
		t.Errorf("with metrics (-want +got):\n%s", diff)
	}
}

// The throttle counter counts throttled attempts only, of either kind
// (ThrottlingException, ProvisionedThroughputExceededException): a call
// that fails for another reason, or goes through at once, reports
// nothing, and a throttled call that runs out of attempts reports each of
// them.
func TestMetricsThrottleCountOnly(t *testing.T) {
	e := newEnv(t)
	p, err := faultproxy.Start(ddbtest.Shared(t).Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var m metricsLog
	ddb := clientWithRetryer(t, p.URL(), retry.NewStandard(fastRetries(2)))
	c := e.clientOn(ddb, ddblock.WithClock(fakeClock()), ddblock.WithMetrics(&m))
	ctx := context.Background()

	// A server error, then throughput exceeded, retried once each: one
	// throttle.
	p.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError, Op: "PutItem", Count: 1})
	if _, err := c.TryAcquireLock(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	p.MustInject(faultproxy.Rule{Kind: faultproxy.ThroughputExceeded, Op: "PutItem", Count: 1})
	if _, err := c.TryAcquireLock(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	// Throttled on both attempts the SDK client makes: two throttles, and
	// the call fails.
	f := p.MustInject(faultproxy.Rule{Kind: faultproxy.Throttling, Op: "GetItem"})
	if _, err := c.GetLock(ctx, "a", ""); err == nil {
		t.Fatal("GetLock through a throttled GetItem succeeded")
	}
	f.Remove()
	if _, err := c.GetLock(ctx, "a", ""); err != nil {
		t.Errorf("GetLock once the throttling stopped: %v", err)
	}
	wantInjected := map[string]map[faultproxy.Kind]int64{
		"PutItem": {faultproxy.ServerError: 1, faultproxy.ThroughputExceeded: 1},
		"GetItem": {faultproxy.Throttling: 2},
	}
	if diff := cmp.Diff(wantInjected, p.Counts().InjectedByOp); diff != "" {
		t.Fatalf("faults injected (-want +got):\n%s", diff)
	}
	want := map[string]int{"acquire ok=true": 2, "throttled PutItem": 1, "throttled GetItem": 2}
	if diff := cmp.Diff(want, m.all()); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}
