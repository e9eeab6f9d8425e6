package ddblock

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ddblock/ddblock/internal/wire"
)

// GetLock reads the lock on (partitionKey, sortKey) from the table,
// whoever holds it: Python's BaseDynamoDBLock. An empty sortKey means
// the default, "-". It returns an error of CodeLockNotFound when there is
// no such lock (an item kept after its release counts as none; the error
// then also matches CodeLockReleased), CodeInvalidItem when the item is
// not a lock item, CodeInvalidArgument, before any call, for a key
// DynamoDB would refuse (empty, over its length, not UTF-8), and
// CodeTableNotFound, CodeTableMismatch or CodeUnknown when the read
// fails.
//
// A lock item says who wrote it last, not that its holder is alive: a
// crashed holder's item stays until someone takes it over.
func (c *Client) GetLock(ctx context.Context, partitionKey, sortKey string) (*LockInfo, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	sortKey = c.defaultSortKey(sortKey)
	if err := c.checkItemKey(partitionKey, sortKey); err != nil {
		return nil, err
	}
	info, err := c.readItem(ctx, partitionKey, sortKey)
	var lerr *Error
	switch {
	case errors.As(err, &lerr):
		return nil, lerr
	case err != nil:
		return nil, c.tableError(err, "reading the lock", partitionKey, sortKey)
	case info == nil:
		return nil, &Error{Code: CodeLockNotFound, Message: "no lock item", PartitionKey: partitionKey, SortKey: sortKey}
	case info.Released:
		return nil, &Error{Code: CodeLockNotFound, Message: "the lock was released", PartitionKey: partitionKey, SortKey: sortKey,
			Err: &Error{Code: CodeLockReleased, Message: fmt.Sprintf("kept after release; fencing token %d", info.FencingToken)}}
	}
	if err := c.fillSession(ctx, info, nil); err != nil {
		return nil, c.tableError(err, "reading the lock's session", partitionKey, sortKey)
	}
	return info, nil
}

// fillSession reads the session item of a lock attached to one into
// info.Session.Item, through cache (session key to item) when given.
func (c *Client) fillSession(ctx context.Context, info *LockInfo, cache map[string]*LockInfo) error {
	if info.Session == nil || info.Released {
		return nil
	}
	key := info.Session.PartitionKey
	if item, ok := cache[key]; ok {
		info.Session.Item = item
		return nil
	}
	item, _, _, err := c.readSession(ctx, key)
	if err != nil {
		return err
	}
	info.Session.Item = item
	if cache != nil {
		cache[key] = item
	}
	return nil
}

// defaultSortKey turns an empty sort key into the client's default.
func (c *Client) defaultSortKey(sk string) string {
	if sk == "" && !c.opts.PartitionKeyOnly {
		return DefaultSortKey
	}
	return sk
}

// ListLocks returns every lock in the table, one page of a strongly
// consistent Scan at a time; items kept after their release,
// semaphores' metadata items and lines of fair waiters (which are not
// locks) are left out.
// Session items are listed too (IsSession); a lock attached to a session
// comes with its session item as read during the listing (Session.Item),
// one read per session. An item that is not a lock item yields a
// CodeInvalidItem error and
// the listing goes on; a failed call yields its error and ends the
// listing.
//
//	for info, err := range client.ListLocks(ctx) { … }
func (c *Client) ListLocks(ctx context.Context) iter.Seq2[*LockInfo, error] {
	if err := c.usable(); err != nil {
		return failed(err)
	}
	if err := checkContext(ctx); err != nil {
		return failed(err)
	}
	return c.pages(ctx, func(start map[string]types.AttributeValue) (pageResult, error) {
		out, err := c.ddb.Scan(ctx, c.wire().Scan(start), c.callOpts("Scan")...)
		if err != nil {
			return pageResult{}, err
		}
		return pageResult{out.Items, out.LastEvaluatedKey}, nil
	})
}

// ListLocksByPartitionKey returns the locks that share a partition key
// (one per sort key), with a strongly consistent Query. A key DynamoDB
// would refuse (empty, over its length, not UTF-8) yields one error of
// CodeInvalidArgument, before any call.
func (c *Client) ListLocksByPartitionKey(ctx context.Context, partitionKey string) iter.Seq2[*LockInfo, error] {
	if err := c.usable(); err != nil {
		return failed(err)
	}
	if err := checkContext(ctx); err != nil {
		return failed(err)
	}
	if err := checkKeyValue("PartitionKey", partitionKey, maxPartitionKeyBytes); err != nil {
		return failed(err)
	}
	return c.pages(ctx, func(start map[string]types.AttributeValue) (pageResult, error) {
		out, err := c.ddb.Query(ctx, c.wire().ListPartition(partitionKey, start), c.callOpts("Query")...)
		if err != nil {
			return pageResult{}, err
		}
		return pageResult{out.Items, out.LastEvaluatedKey}, nil
	})
}

// failed is a listing that yields err alone.
func failed(err error) iter.Seq2[*LockInfo, error] {
	return func(yield func(*LockInfo, error) bool) { yield(nil, err) }
}

type pageResult struct {
	items []map[string]types.AttributeValue
	next  map[string]types.AttributeValue
}

func (c *Client) pages(ctx context.Context, fetch func(start map[string]types.AttributeValue) (pageResult, error)) iter.Seq2[*LockInfo, error] {
	return func(yield func(*LockInfo, error) bool) {
		var start map[string]types.AttributeValue
		sessions := make(map[string]*LockInfo)
		for {
			page, err := fetch(start)
			if err != nil {
				yield(nil, c.tableError(err, "listing locks", "", ""))
				return
			}
			for _, item := range page.items {
				if isSemaphoreMeta(item) || c.isLineItem(item) {
					continue // a semaphore's number of slots, or a line of waiters: not a lock
				}
				info, err := c.codec.decode(item)
				if err == nil && info.Released {
					continue
				}
				if err == nil {
					if serr := c.fillSession(ctx, info, sessions); serr != nil {
						yield(nil, c.tableError(serr, "reading a lock's session", info.PartitionKey, info.SortKey))
						return
					}
				}
				if !yield(info, err) {
					return
				}
			}
			if len(page.next) == 0 {
				return
			}
			start = page.next
			if ctx.Err() != nil {
				yield(nil, &Error{Code: CodeCanceled, Message: "listing locks", Err: context.Cause(ctx)})
				return
			}
		}
	}
}

// tableError classifies a failed call: a missing table, a table whose
// keys are not the client's, a request the server refused as invalid
// (such as an item over 400 KB), or anything else.
func (c *Client) tableError(err error, doing, pk, sk string) *Error {
	code, msg := CodeUnknown, doing
	invalid, isInvalid := wire.Invalid(err)
	switch {
	case wire.AccessDenied(err):
		code = CodeAccessDenied
		msg = doing + ": AWS refused the call (a permission or the credentials)"
	case wire.TableNotFound(err):
		code = CodeTableNotFound
		msg = doing + ": table " + c.opts.TableName + " does not exist"
	case isInvalid:
		if strings.Contains(strings.ToLower(invalid), "key") {
			code = CodeTableMismatch
			msg = fmt.Sprintf("%s: table %s does not have the keys this client uses (partition key %q, sort key %q, both strings)",
				doing, c.opts.TableName, c.opts.PartitionKeyName, c.opts.SortKeyName)
		} else {
			code = CodeInvalidArgument
			msg = doing + ": the server refused the request"
		}
	}
	return &Error{Code: code, Message: msg, PartitionKey: pk, SortKey: sk, Err: err}
}
