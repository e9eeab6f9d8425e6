package wire

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
)

// A call is judged by every attempt, not by its last.
//
// The SDK's retryer makes several attempts of one call and returns the
// last one's error. When the first attempt reached DynamoDB and its reply
// was lost, and the retries then could not even connect, the last error
// is a failed dial: judged alone it says "never sent", and a caller who
// believes it may apply a write twice, or take its own landed heartbeat
// for another client's. JudgeAttempts records, attempt by attempt,
// whether any attempt may have been applied, and wraps the call's error
// in *EarlierAttemptError when one may have been although the last error
// alone says otherwise.

// EarlierAttemptError is the error of a call whose last attempt failed
// in a way that, alone, would say nothing was applied (it was never
// sent, or DynamoDB refused it), while an earlier attempt of the same
// call may have been applied: it was sent and its answer never came, or
// was a server error. It unwraps to the last attempt's error, so that
// every other classification still sees it.
type EarlierAttemptError struct {
	// Attempts is how many attempts the call made, and Earlier the
	// 1-based number of the first one that may have been applied.
	Attempts, Earlier int
	// Err is the last attempt's error, as the SDK returned it.
	Err error
}

func (e *EarlierAttemptError) Error() string {
	return "an earlier attempt of this call may have been applied (its answer was lost); the last attempt failed: " + e.Err.Error()
}

// Unwrap returns the last attempt's error.
func (e *EarlierAttemptError) Unwrap() error { return e.Err }

// earlierAttempt reports whether err carries *EarlierAttemptError.
func earlierAttempt(err error) bool {
	var e *EarlierAttemptError
	return errors.As(err, &e)
}

// mayHaveApplied reports whether one attempt that ended with err may have
// been applied: it succeeded, or it was sent and no refusal came back.
// Only an answer from DynamoDB that refused the request (a 4xx), or a
// connection that was never made, says it was not.
func mayHaveApplied(err error) bool {
	if err == nil {
		return true
	}
	if neverSentAlone(err) {
		return false
	}
	var api smithy.APIError
	if !errors.As(err, &api) {
		return true // no answer: a timeout, a dropped connection
	}
	return api.ErrorFault() == smithy.FaultServer
}

// attemptsKey keys a call's attempt record among the stack values.
type attemptsKey struct{}

// attempts is one call's record of its attempts.
type attempts struct {
	n, earlier int // earlier: first that may have been applied, 0 for none
}

// Middleware IDs in the SDK's stack.
const (
	judgeCallID    = "ddblock.JudgeAttempts"
	recordAttempID = "ddblock.RecordAttempt"
)

// RetryID is the SDK's name for its retry middleware, which runs the
// attempts of a call in the Finalize step: a middleware inserted right
// after it runs once an attempt.
var RetryID = (*retry.Attempt)(nil).ID()

// JudgeAttempts adds to a call's stack a middleware around the SDK's
// retries, which wraps the call's error in *EarlierAttemptError where an
// earlier attempt may have been applied, and one inside them, run once an
// attempt, which records each attempt's outcome. In a stack without the
// retry middleware each call is one attempt, and nothing is added.
func JudgeAttempts(s *middleware.Stack) error {
	if _, ok := s.Finalize.Get(RetryID); !ok {
		return nil
	}
	judge := middleware.FinalizeMiddlewareFunc(judgeCallID, func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
		middleware.FinalizeOutput, middleware.Metadata, error,
	) {
		rec := &attempts{}
		out, md, err := next.HandleFinalize(middleware.WithStackValue(ctx, attemptsKey{}, rec), in)
		if err != nil && rec.earlier > 0 && rec.earlier < rec.n && !OutcomeUnknown(err) {
			err = &EarlierAttemptError{Attempts: rec.n, Earlier: rec.earlier, Err: err}
		}
		return out, md, err
	})
	record := middleware.FinalizeMiddlewareFunc(recordAttempID, func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
		middleware.FinalizeOutput, middleware.Metadata, error,
	) {
		out, md, err := next.HandleFinalize(ctx, in)
		if rec, ok := middleware.GetStackValue(ctx, attemptsKey{}).(*attempts); ok {
			rec.n++
			if rec.earlier == 0 && mayHaveApplied(err) {
				rec.earlier = rec.n
			}
		}
		return out, md, err
	})
	if err := s.Finalize.Insert(judge, RetryID, middleware.Before); err != nil {
		return err
	}
	return s.Finalize.Insert(record, RetryID, middleware.After)
}
