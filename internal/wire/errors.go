package wire

import (
	"errors"
	"net"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// Transient reports whether a failed call is worth another attempt:
// throttling, a server error, a timeout or a lost connection, as the
// SDK's default retryer judges them.
func Transient(err error) bool {
	return err != nil && retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary
}

// Throttled reports whether err is a throttling error, as the SDK's
// retryers tell them by default.
func Throttled(err error) bool {
	return err != nil && retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err) == aws.TrueTernary
}

// OutcomeUnknown reports whether a failed write may nevertheless have
// been applied. A request that never left this host cannot have been
// (see NeverSent). Anything after the request was sent may have been: a
// timeout or a cancel while waiting for the reply, a connection reset
// mid-response, a 5xx. Only an answer from DynamoDB that refused the
// write (a 4xx) says it was not applied, and only when no earlier
// attempt of the same call may have been (see EarlierAttemptError). A
// cancelled transaction says so even then: every attempt of one carries
// the same client request token, and DynamoDB answers the repeat of a
// committed one with success.
func OutcomeUnknown(err error) bool {
	if err == nil || NeverSent(err) {
		return false
	}
	if earlierAttempt(err) {
		var canceled *types.TransactionCanceledException
		return !errors.As(err, &canceled)
	}
	return mayHaveApplied(err)
}

// NeverSent reports whether err says the request could not be sent: the
// connection to the endpoint was never made, on the last attempt and on
// every earlier one. Go's HTTP transport dials before it writes a
// request, and reports a failed dial (DNS included) as a *net.OpError
// whose Op is "dial".
func NeverSent(err error) bool {
	return !earlierAttempt(err) && neverSentAlone(err)
}

// neverSentAlone is NeverSent for one attempt's error.
func neverSentAlone(err error) bool {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// ConditionFailed reports whether a write was refused by its condition.
func ConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// TableNotFound reports whether the table (or index) does not exist.
func TableNotFound(err error) bool {
	var rnf *types.ResourceNotFoundException
	return errors.As(err, &rnf)
}

// Invalid reports whether the server refused the request as malformed
// (a ValidationException), and returns its message.
func Invalid(err error) (msg string, ok bool) {
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorCode() == "ValidationException" {
		return api.ErrorMessage(), true
	}
	return "", false
}

// UnsupportedOperation reports whether the server said it has no such
// operation: dynalite answers TransactWriteItems with
// UnknownOperationException.
func UnsupportedOperation(err error) bool {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode() {
	case "UnknownOperationException", "UnknownOperation", "InvalidAction", "NotImplemented":
		return true
	}
	return false
}

// FailedItem reports whether a write was refused by its condition, and
// returns the item that failed it when the server sent it back (asked
// with ReturnValuesOnConditionCheckFailure; dynalite never sends it).
func FailedItem(err error) (item map[string]types.AttributeValue, failed bool) {
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return nil, false
	}
	return ccf.Item, true
}

// CancellationReasons returns the reasons, one per action, of a
// cancelled transaction; false when err is no cancellation or carries
// no reasons.
func CancellationReasons(err error) ([]types.CancellationReason, bool) {
	var canceled *types.TransactionCanceledException
	if !errors.As(err, &canceled) || len(canceled.CancellationReasons) == 0 {
		return nil, false
	}
	return canceled.CancellationReasons, true
}

// TransactionConflict reports whether DynamoDB refused a plain write
// (PutItem, UpdateItem, DeleteItem) because a transaction that includes
// its item was under way. Nothing was written, unless an earlier attempt
// of the same call may have been (see OutcomeUnknown). The SDK does not
// retry it by itself.
func TransactionConflict(err error) bool {
	var conflict *types.TransactionConflictException
	return errors.As(err, &conflict)
}

// AccessDenied reports whether AWS refused the call for want of
// permission or of valid credentials: an IAM policy that does not allow
// the action (AccessDeniedException, whose message names the action and
// the resource), credentials that expired, were never valid, or signed
// the request wrongly. Asking again cannot help, and the SDK does not.
func AccessDenied(err error) bool {
	var api interface{ ErrorCode() string }
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode() {
	case "AccessDeniedException", "AccessDenied", "NotAuthorized", "UnauthorizedOperation",
		"ExpiredTokenException", "ExpiredToken", "UnrecognizedClientException",
		"InvalidSignatureException", "MissingAuthenticationTokenException",
		"InvalidClientTokenId", "IncompleteSignatureException", "SignatureDoesNotMatch":
		return true
	}
	return false
}
