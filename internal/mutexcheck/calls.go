package mutexcheck

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/wire"
)

// Recorder is a ddblock client's DynamoDB API that logs every call it
// passes on ([Log.Call]): when it was sent and answered, on which item,
// and how it ended. The progress check reads them to know when a
// waiter was looking (a call in flight: what the key looks like then is
// not yet known to it), when it could not look (a failed call, and the
// retry period or the back-off after it), and which puts may have
// written a lock item that no tenure accounts for.
//
// Table items are named by ddblock's default key attribute names.
type Recorder struct {
	API    ddblock.DynamoDBAPI
	Client string // the client's owner name
	Log    *Log
}

var _ ddblock.DynamoDBAPI = (*Recorder)(nil)

// rvnAttr is the attribute of a lock item that holds its record version
// number, as python_dynamodb_lock names it.
const rvnAttr = "record_version_number"

func (r *Recorder) record(op string, key map[string]types.AttributeValue, sent int64, err error, detail string) {
	r.Log.Call(r.Client, op, str(key[ddblock.DefaultPartitionKeyName]), str(key[ddblock.DefaultSortKeyName]), sent, Now(), outcomeOf(err), detail)
}

// outcomeOf is "ok", "cond" (the call's condition failed) or "err".
func outcomeOf(err error) string {
	var cond *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &cond):
		return "cond"
	default:
		return "err"
	}
}

// str is the value of a string attribute, or "?" when there is none: a
// call the check cannot tie to a key concerns every key.
func str(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok && s.Value != "" {
		return s.Value
	}
	return "?"
}

// GetItem passes the call on and logs it.
func (r *Recorder) GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	t := Now()
	out, err := r.API.GetItem(ctx, in, optFns...)
	r.record("GetItem", in.Key, t, err, "")
	return out, err
}

// PutItem passes the call on and logs it, with the record version
// number it writes. A put whose condition failed after a retry of the
// SDK's is logged as "err": its first attempt may have landed, its
// answer lost, and the retry failed the condition on what it wrote.
func (r *Recorder) PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	var attempts atomic.Int32
	t := Now()
	out, err := r.API.PutItem(ctx, in, append(slices.Clone(optFns), countAttempts(&attempts))...)
	rvn := str(in.Item[rvnAttr])
	if rvn == "?" {
		rvn = ""
	}
	outcome := outcomeOf(err)
	if outcome == "cond" && attempts.Load() > 1 {
		outcome = "err"
	}
	r.Log.Call(r.Client, "PutItem", str(in.Item[ddblock.DefaultPartitionKeyName]), str(in.Item[ddblock.DefaultSortKeyName]), t, Now(), outcome, rvn)
	return out, err
}

// countAttempts is a per-call option that counts the call's attempts: a
// middleware just inside the SDK's retry middleware, which runs once an
// attempt.
func countAttempts(n *atomic.Int32) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			count := middleware.FinalizeMiddlewareFunc("mutexcheck.CountAttempts", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
				middleware.FinalizeOutput, middleware.Metadata, error,
			) {
				n.Add(1)
				return next.HandleFinalize(ctx, in)
			})
			if _, ok := s.Finalize.Get(wire.RetryID); ok {
				return s.Finalize.Insert(count, wire.RetryID, middleware.After)
			}
			return s.Finalize.Add(count, middleware.Before)
		})
	}
}

// UpdateItem passes the call on and logs it, as a "release" when it
// sets a value true (it marks a kept item released; a heartbeat only
// moves the version and the TTL).
func (r *Recorder) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	t := Now()
	out, err := r.API.UpdateItem(ctx, in, optFns...)
	what := ""
	for _, v := range in.ExpressionAttributeValues {
		if b, ok := v.(*types.AttributeValueMemberBOOL); ok && b.Value {
			what = "release"
		}
	}
	r.record("UpdateItem", in.Key, t, err, what)
	return out, err
}

// DeleteItem passes the call on and logs it, as a "release".
func (r *Recorder) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	t := Now()
	out, err := r.API.DeleteItem(ctx, in, optFns...)
	r.record("DeleteItem", in.Key, t, err, "release")
	return out, err
}

// Query passes the call on and logs it as a call on every key.
func (r *Recorder) Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	t := Now()
	out, err := r.API.Query(ctx, in, optFns...)
	r.record("Query", nil, t, err, "")
	return out, err
}

// Scan passes the call on and logs it as a call on every key.
func (r *Recorder) Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	t := Now()
	out, err := r.API.Scan(ctx, in, optFns...)
	r.record("Scan", nil, t, err, "")
	return out, err
}

// TransactWriteItems passes the call on. A guarded write's transaction
// checks a lock item and writes none, and goes unlogged; the puts of a
// set's transaction (AcquireLocks) are logged one by one, each as a
// PutItem of the transaction's outcome: "ok", "cond" when DynamoDB
// cancelled it on its first attempt (nothing written), else "err".
func (r *Recorder) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	tw, ok := r.API.(interface {
		TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	})
	if !ok {
		return nil, errors.New("mutexcheck: the API a Recorder wraps has no TransactWriteItems")
	}
	var attempts atomic.Int32
	t := Now()
	out, err := tw.TransactWriteItems(ctx, in, append(slices.Clone(optFns), countAttempts(&attempts))...)
	outcome := "err"
	var canceled *types.TransactionCanceledException
	switch {
	case err == nil:
		outcome = "ok"
	case errors.As(err, &canceled) && attempts.Load() == 1:
		outcome = "cond"
	}
	end := Now()
	for _, it := range in.TransactItems {
		if it.Put == nil {
			continue
		}
		rvn := str(it.Put.Item[rvnAttr])
		if rvn == "?" {
			rvn = ""
		}
		r.Log.Call(r.Client, "PutItem", str(it.Put.Item[ddblock.DefaultPartitionKeyName]), str(it.Put.Item[ddblock.DefaultSortKeyName]), t, end, outcome, rvn)
	}
	return out, err
}

// StallThreshold is the lateness from which [WatchStalls] reports a
// stall: a process that runs later than that is on record as not
// running, and the progress bound allows a few lateness below it
// (see [ProgressBound]).
const StallThreshold = 10 * time.Millisecond

// stallTick is how often WatchStalls looks at the clock.
const stallTick = 5 * time.Millisecond

// WatchStalls watches, until ctx ends, whether the process runs on
// time: it sleeps a few milliseconds over and over, and when a sleep
// ends more than StallThreshold late (the process was stopped by
// SIGSTOP, or starved of CPU on a busy machine) it logs a "stall" of
// target from the sleep's start to its end. A waiter of a stalled
// process does not see a free lock while it does not run.
func WatchStalls(ctx context.Context, log *Log, target string) {
	timer := time.NewTimer(stallTick)
	defer timer.Stop()
	for {
		t0 := Now()
		timer.Reset(stallTick)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if t1 := Now(); time.Duration(t1-t0) > stallTick+StallThreshold {
			log.Trouble(target, t0, t1, "stall", 0)
		}
	}
}
