package compat_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
)

// This file is the Python side of the compatibility tests: pyClient
// behaves as python_dynamodb_lock 0.9's DynamoDBLockClient does, call for
// call, so that a Go client can be made to contend with "Python" on a real
// server. It follows docs/python-protocol.md:
//
//   - acquire: a strongly consistent GetItem, then a PutItem guarded by
//     NOT(attribute_exists(#pk) AND attribute_exists(#sk)) when there is no
//     item, or — once the same record version number has been seen for
//     longer than the item's own lease, on the monotonic clock — a PutItem
//     guarded by attribute_exists(#pk) AND attribute_exists(#sk) AND
//     #rvn = :old_rvn. A failed condition is retried, sleeping until
//     start + n·retry_period, until retry_timeout;
//   - one heartbeat thread: every period, an UpdateItem per LOCKED lock
//     (SET #rvn = :new_rvn, #et = :new_et, same ownership condition),
//     spread over the period; a failed condition makes the lock INVALID and
//     calls back LOCK_STOLEN;
//   - one checker thread: every period, a LOCKED lock not heartbeated
//     within safe_period becomes IN_DANGER (and is never heartbeated again);
//   - release: RELEASED first, then a DeleteItem with the ownership
//     condition;
//   - the item: the additional attributes, overwritten by the lock's own
//     attributes; the lease as Decimal.from_float(seconds) passed through
//     boto3's number serializer; the owner as FQDN + uuid4 hex; the record
//     version number as a dashed uuid4; the expiry as whole epoch seconds.
//
// The expressions are written by hand, with Python's own placeholder
// names, as Python writes them.

// Python's codes and statuses.
const (
	pyClientShutdown = "CLIENT_SHUTDOWN"
	pyAcquireTimeout = "ACQUIRE_TIMEOUT"
	pyLockNotOwned   = "LOCK_NOT_OWNED"
	pyLockStolen     = "LOCK_STOLEN"
	pyLockInDanger   = "LOCK_IN_DANGER"
	pyUnknown        = "UNKNOWN"

	pyPending  = "PENDING"
	pyLocked   = "LOCKED"
	pyReleased = "RELEASED"
	pyInDanger = "IN_DANGER"
	pyInvalid  = "INVALID"
)

// Python's fixed attribute names.
const (
	colOwnerName     = "owner_name"
	colLeaseDuration = "lease_duration"
	colRVN           = "record_version_number"
)

// pyFQDN stands for socket.getfqdn(): the peer runs on this machine, but
// an FQDN with dots is what Python services typically write.
const pyFQDN = "python-worker.compat.test"

// pyLockError is DynamoDBLockError.
type pyLockError struct {
	Code, Message string
}

func (e *pyLockError) Error() string { return "DynamoDBLockError: " + e.Code + " - " + e.Message }

// pyConfig holds DynamoDBLockClient's constructor arguments.
type pyConfig struct {
	names
	OwnerName       string // "" for Python's default, FQDN + uuid4 hex
	HeartbeatPeriod time.Duration
	SafePeriod      time.Duration
	LeaseDuration   time.Duration
	ExpiryPeriod    time.Duration
	HeartbeatTPS    int
}

// pyDefaults are python_dynamodb_lock's defaults on the given table.
func pyDefaults(n names) pyConfig {
	return pyConfig{
		names:           n,
		HeartbeatPeriod: 5 * time.Second,
		SafePeriod:      20 * time.Second,
		LeaseDuration:   30 * time.Second,
		ExpiryPeriod:    time.Hour,
		HeartbeatTPS:    -1,
	}
}

// pyClient is DynamoDBLockClient.
type pyClient struct {
	cfg   pyConfig
	ddb   ddblock.DynamoDBAPI
	uuid  string
	owner string

	mu    sync.Mutex // Python's dict operations are atomic under the GIL
	locks map[string]*pyLock

	shuttingDown atomic.Bool
	stop         chan struct{}
	threads      sync.WaitGroup
	callbacks    sync.WaitGroup
}

// pyBaseLock is BaseDynamoDBLock: a lock as stored in the table.
type pyBaseLock struct {
	PartitionKey         string
	SortKey              string
	OwnerName            string
	LeaseDuration        float64 // seconds, as Python's float
	RecordVersionNumber  string
	ExpiryTime           int64
	AdditionalAttributes map[string]types.AttributeValue
	UniqueIdentifier     string
}

// pyLock is DynamoDBLock: a lock held by a pyClient. threadLock guards the
// mutable fields, as Python's per-lock RLock does.
type pyLock struct {
	client      *pyClient
	appCallback func(code string, l *pyLock)

	threadLock      sync.Mutex
	base            pyBaseLock
	status          string
	lastUpdatedTime time.Time // time.monotonic()
}

// Status returns the lock's status.
func (l *pyLock) Status() string {
	l.threadLock.Lock()
	defer l.threadLock.Unlock()
	return l.status
}

// RecordVersionNumber returns the version number last written.
func (l *pyLock) RecordVersionNumber() string {
	l.threadLock.Lock()
	defer l.threadLock.Unlock()
	return l.base.RecordVersionNumber
}

// newPyClient is DynamoDBLockClient(...): it starts the heartbeat sender
// and checker threads.
func newPyClient(ddb ddblock.DynamoDBAPI, cfg pyConfig) *pyClient {
	c := &pyClient{cfg: cfg, ddb: ddb, uuid: uuidHex(), locks: map[string]*pyLock{}, stop: make(chan struct{})}
	c.owner = cfg.OwnerName
	if c.owner == "" {
		c.owner = pyFQDN + c.uuid
	}
	c.threads.Add(2)
	go c.sendHeartbeatLoop()
	go c.checkHeartbeatLoop()
	return c
}

// sleep is time.sleep; it returns early when the client closes, which
// only makes close() quicker than Python's join.
func (c *pyClient) sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.stop:
	}
}

func (c *pyClient) lockSnapshot() []*pyLock {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*pyLock, 0, len(c.locks))
	for _, l := range c.locks {
		out = append(out, l)
	}
	return out
}

func (c *pyClient) isHeld(l *pyLock) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.locks[l.base.UniqueIdentifier] == l
}

// sendHeartbeatLoop is _send_heartbeat_loop.
func (c *pyClient) sendHeartbeatLoop() {
	defer c.threads.Done()
	period := c.cfg.HeartbeatPeriod
	for !c.shuttingDown.Load() {
		start := time.Now()
		locks := c.lockSnapshot()
		avgLoopTime := time.Duration(-1)
		if c.cfg.HeartbeatTPS == -1 {
			if len(locks) > 0 {
				avgLoopTime = period / time.Duration(len(locks))
			}
		} else {
			avgLoopTime = time.Second / time.Duration(c.cfg.HeartbeatTPS)
		}
		for i, l := range locks {
			c.sendHeartbeat(l)
			c.sleep(time.Until(start.Add(time.Duration(i+1) * avgLoopTime)))
		}
		if next := start.Add(period); time.Now().Before(next) && !c.shuttingDown.Load() {
			c.sleep(time.Until(next))
		}
	}
}

// sendHeartbeat is _send_heartbeat.
func (c *pyClient) sendHeartbeat(l *pyLock) {
	l.threadLock.Lock()
	defer l.threadLock.Unlock()
	if !c.isHeld(l) || l.status != pyLocked {
		return
	}
	newRVN := uuid4()
	newExpiry := time.Now().Add(c.cfg.ExpiryPeriod).Unix()
	err := pyHeartbeat(context.Background(), c.ddb, c.cfg.names, l.base.PartitionKey, l.base.SortKey, l.base.RecordVersionNumber, newRVN, newExpiry)
	switch {
	case err == nil:
		l.base.RecordVersionNumber = newRVN
		l.base.ExpiryTime = newExpiry
		l.lastUpdatedTime = time.Now()
		l.status = pyLocked
	case isCCF(err):
		l.status = pyInvalid
		c.mu.Lock()
		delete(c.locks, l.base.UniqueIdentifier)
		c.mu.Unlock()
		c.callAppCallback(l, pyLockStolen)
	default:
		// Python logs the error and leaves the lock alone.
	}
}

// pyHeartbeat is the UpdateItem of _send_heartbeat, on its own so that a
// test can play a Python holder's heartbeat out of band.
func pyHeartbeat(ctx context.Context, ddb ddblock.DynamoDBAPI, n names, pk, sk, oldRVN, newRVN string, newExpiry int64) error {
	_, err := ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           aws.String(n.Table),
		Key:                 pyKey(n, pk, sk),
		UpdateExpression:    aws.String("SET #rvn = :new_rvn, #et = :new_et"),
		ConditionExpression: aws.String("attribute_exists(#pk) AND attribute_exists(#sk) AND #rvn = :old_rvn"),
		ExpressionAttributeNames: map[string]string{
			"#pk":  n.PK,
			"#sk":  n.SK,
			"#rvn": colRVN,
			"#et":  n.TTL,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":old_rvn": &types.AttributeValueMemberS{Value: oldRVN},
			":new_rvn": &types.AttributeValueMemberS{Value: newRVN},
			":new_et":  &types.AttributeValueMemberN{Value: strconv.FormatInt(newExpiry, 10)},
		},
	})
	return err
}

// checkHeartbeatLoop is _check_heartbeat_loop.
func (c *pyClient) checkHeartbeatLoop() {
	defer c.threads.Done()
	for !c.shuttingDown.Load() {
		start := time.Now()
		for _, l := range c.lockSnapshot() {
			c.checkHeartbeat(l)
		}
		if next := start.Add(c.cfg.HeartbeatPeriod); time.Now().Before(next) && !c.shuttingDown.Load() {
			c.sleep(time.Until(next))
		}
	}
}

// checkHeartbeat is _check_heartbeat.
func (c *pyClient) checkHeartbeat(l *pyLock) {
	l.threadLock.Lock()
	defer l.threadLock.Unlock()
	if !c.isHeld(l) || l.status != pyLocked {
		return
	}
	if time.Now().Before(l.lastUpdatedTime.Add(c.cfg.SafePeriod)) {
		return
	}
	l.status = pyInDanger
	c.callAppCallback(l, pyLockInDanger)
}

// callAppCallback is _call_app_callback: the callback runs on another
// thread (Python's executor).
func (c *pyClient) callAppCallback(l *pyLock, code string) {
	if l.appCallback == nil {
		return
	}
	c.callbacks.Add(1)
	go func() {
		defer c.callbacks.Done()
		l.appCallback(code, l)
	}()
}

// pyAcquireOptions are acquire_lock's keyword arguments.
type pyAcquireOptions struct {
	SortKey              string        // default "-"
	RetryPeriod          time.Duration // default: heartbeat period
	RetryTimeout         time.Duration // default: lease + heartbeat period
	AdditionalAttributes map[string]types.AttributeValue
	AppCallback          func(code string, l *pyLock)
}

// acquireLock is acquire_lock.
func (c *pyClient) acquireLock(ctx context.Context, pk string, o pyAcquireOptions) (*pyLock, error) {
	if o.SortKey == "" {
		o.SortKey = "-"
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = c.cfg.HeartbeatPeriod
	}
	if o.RetryTimeout == 0 {
		o.RetryTimeout = c.cfg.LeaseDuration + c.cfg.HeartbeatPeriod
	}
	newLock := &pyLock{
		client:      c,
		appCallback: o.AppCallback,
		status:      pyPending,
		base: pyBaseLock{
			PartitionKey:         pk,
			SortKey:              o.SortKey,
			OwnerName:            c.owner,
			LeaseDuration:        c.cfg.LeaseDuration.Seconds(),
			RecordVersionNumber:  uuid4(), // one for every attempt, as in Python
			ExpiryTime:           time.Now().Add(c.cfg.ExpiryPeriod).Unix(),
			AdditionalAttributes: o.AdditionalAttributes,
			UniqueIdentifier:     pyQuote(pk) + "|" + pyQuote(o.SortKey),
		},
	}
	if newLock.base.AdditionalAttributes == nil {
		newLock.base.AdditionalAttributes = map[string]types.AttributeValue{}
	}
	start := time.Now()
	retryTimeoutTime := start.Add(o.RetryTimeout)
	retryCount := 0
	lastRVN := ""
	var lastVersionFetchTime time.Time
	for {
		if c.shuttingDown.Load() {
			return nil, &pyLockError{pyClientShutdown, "Client already shut down"}
		}
		err := func() error {
			// Bump the expiry to account for the sleep between tries.
			newLock.lastUpdatedTime = time.Now()
			newLock.base.ExpiryTime = time.Now().Add(c.cfg.ExpiryPeriod).Unix()
			existing, err := c.getLockFromDynamoDB(ctx, pk, o.SortKey)
			if err != nil {
				return err
			}
			if existing == nil {
				if err := c.addNewLockToDynamoDB(ctx, &newLock.base); err != nil {
					return err
				}
				c.hold(newLock)
				return nil
			}
			if existing.RecordVersionNumber != lastRVN {
				lastRVN = existing.RecordVersionNumber
				lastVersionFetchTime = time.Now()
				return errWaiting
			}
			if pyLeaseRunOut(time.Since(lastVersionFetchTime), existing) {
				if err := c.overwriteExistingLockInDynamoDB(ctx, &newLock.base, lastRVN); err != nil {
					return err
				}
				c.hold(newLock)
				return nil
			}
			return errWaiting
		}()
		switch {
		case err == nil:
			return newLock, nil
		case errors.Is(err, errWaiting), isCCF(err):
			// Someone holds it, or beat us to it: sleep and retry.
		default:
			return nil, &pyLockError{pyUnknown, err.Error()}
		}
		retryCount++
		next := start.Add(time.Duration(retryCount) * o.RetryPeriod)
		if next.After(retryTimeoutTime) {
			return nil, &pyLockError{pyAcquireTimeout, "acquire_lock() timed out: " + newLock.base.UniqueIdentifier}
		}
		if d := time.Until(next); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, &pyLockError{pyUnknown, ctx.Err().Error()}
			}
		}
	}
}

var errWaiting = errors.New("lock held by another client")

// pyLeaseRunOut is acquire_lock's takeover rule: the same record version
// number has stood for longer than the lease the item states, in seconds
// as a float, timed since it was first seen on the monotonic clock.
// Python knows no other rule (no session, no stamp, no expiry), so a test
// can ask it what Python decides after any wait without living through it.
func pyLeaseRunOut(sinceFirstSeen time.Duration, existing *pyBaseLock) bool {
	return sinceFirstSeen.Seconds() > existing.LeaseDuration
}

func (c *pyClient) hold(l *pyLock) {
	l.threadLock.Lock()
	l.status = pyLocked
	l.threadLock.Unlock()
	c.mu.Lock()
	c.locks[l.base.UniqueIdentifier] = l
	c.mu.Unlock()
}

// releaseLock is release_lock.
func (c *pyClient) releaseLock(ctx context.Context, l *pyLock, bestEffort bool) error {
	l.threadLock.Lock()
	defer l.threadLock.Unlock()
	if l.status != pyLocked && l.status != pyInDanger {
		return nil
	}
	if !c.isHeld(l) {
		if bestEffort {
			return nil
		}
		return &pyLockError{pyLockNotOwned, "Lock is not owned by this client"}
	}
	// First the in-memory state, which stops the heartbeats; then the item.
	l.status = pyReleased
	c.mu.Lock()
	delete(c.locks, l.base.UniqueIdentifier)
	c.mu.Unlock()
	_, err := c.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:           aws.String(c.cfg.Table),
		Key:                 pyKey(c.cfg.names, l.base.PartitionKey, l.base.SortKey),
		ConditionExpression: aws.String("attribute_exists(#pk) AND attribute_exists(#sk) AND #rvn = :rvn"),
		ExpressionAttributeNames: map[string]string{
			"#pk":  c.cfg.PK,
			"#sk":  c.cfg.SK,
			"#rvn": colRVN,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":rvn": &types.AttributeValueMemberS{Value: l.base.RecordVersionNumber},
		},
	})
	switch {
	case err == nil, bestEffort:
		return nil
	case isCCF(err):
		return &pyLockError{pyLockStolen, "Lock was stolen by someone else"}
	default:
		return &pyLockError{pyUnknown, err.Error()}
	}
}

// close is close(release_locks): the threads stop; the locks stay in the
// table (their leases run out) unless releaseLocks. Closing without
// releasing is also how a test plays a Python process that died.
func (c *pyClient) close(releaseLocks bool) {
	if c.shuttingDown.Swap(true) {
		return
	}
	close(c.stop)
	c.threads.Wait()
	if releaseLocks {
		for _, l := range c.lockSnapshot() {
			_ = c.releaseLock(context.Background(), l, true)
		}
	}
	c.callbacks.Wait()
}

// getLockFromDynamoDB is _get_lock_from_dynamodb.
func (c *pyClient) getLockFromDynamoDB(ctx context.Context, pk, sk string) (*pyBaseLock, error) {
	out, err := c.ddb.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(c.cfg.Table),
		Key:            pyKey(c.cfg.names, pk, sk),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	if out.Item == nil {
		return nil, nil
	}
	return pyLockFromItem(c.cfg.names, out.Item)
}

// addNewLockToDynamoDB is _add_new_lock_to_dynamodb.
func (c *pyClient) addNewLockToDynamoDB(ctx context.Context, l *pyBaseLock) error {
	item, err := pyItemFromLock(c.cfg.names, l)
	if err != nil {
		return err
	}
	_, err = c.ddb.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                aws.String(c.cfg.Table),
		Item:                     item,
		ConditionExpression:      aws.String("NOT(attribute_exists(#pk) AND attribute_exists(#sk))"),
		ExpressionAttributeNames: map[string]string{"#pk": c.cfg.PK, "#sk": c.cfg.SK},
	})
	return err
}

// overwriteExistingLockInDynamoDB is _overwrite_existing_lock_in_dynamodb.
func (c *pyClient) overwriteExistingLockInDynamoDB(ctx context.Context, l *pyBaseLock, oldRVN string) error {
	item, err := pyItemFromLock(c.cfg.names, l)
	if err != nil {
		return err
	}
	_, err = c.ddb.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           aws.String(c.cfg.Table),
		Item:                item,
		ConditionExpression: aws.String("attribute_exists(#pk) AND attribute_exists(#sk) AND #rvn = :old_rvn"),
		ExpressionAttributeNames: map[string]string{
			"#pk":  c.cfg.PK,
			"#sk":  c.cfg.SK,
			"#rvn": colRVN,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":old_rvn": &types.AttributeValueMemberS{Value: oldRVN},
		},
	})
	return err
}

// pyLockFromItem is _get_lock_from_item. Python pops its six attributes
// (a missing one is a KeyError, which acquire_lock reports as UNKNOWN) and
// keeps the rest as additional attributes. The peer is stricter than
// Python about types: it accepts only the types Python itself writes, so
// that any drift in what Go writes fails the tests.
func pyLockFromItem(n names, item map[string]types.AttributeValue) (*pyBaseLock, error) {
	rest := make(map[string]types.AttributeValue, len(item))
	for k, v := range item {
		rest[k] = v
	}
	var errs []error
	popS := func(name string) string {
		v, ok := rest[name].(*types.AttributeValueMemberS)
		delete(rest, name)
		if !ok {
			errs = append(errs, fmt.Errorf("KeyError or not a string: %q", name))
			return ""
		}
		return v.Value
	}
	popN := func(name string) string {
		v, ok := rest[name].(*types.AttributeValueMemberN)
		delete(rest, name)
		if !ok {
			errs = append(errs, fmt.Errorf("KeyError or not a number: %q", name))
			return "0"
		}
		return v.Value
	}
	l := &pyBaseLock{
		PartitionKey:        popS(n.PK),
		SortKey:             popS(n.SK),
		OwnerName:           popS(colOwnerName),
		RecordVersionNumber: popS(colRVN),
	}
	lease := popN(colLeaseDuration)
	expiry := popN(n.TTL)
	var err error
	// float(Decimal(s)): the nearest float, as strconv.ParseFloat gives.
	if l.LeaseDuration, err = strconv.ParseFloat(lease, 64); err != nil {
		errs = append(errs, fmt.Errorf("float(%q): %w", lease, err))
	}
	// int(Decimal(s)): truncation towards zero.
	r, ok := new(big.Rat).SetString(expiry)
	if !ok {
		errs = append(errs, fmt.Errorf("int(%q): not a number", expiry))
	} else {
		l.ExpiryTime = new(big.Int).Quo(r.Num(), r.Denom()).Int64()
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	l.AdditionalAttributes = rest
	l.UniqueIdentifier = pyQuote(l.PartitionKey) + "|" + pyQuote(l.SortKey)
	return l, nil
}

// pyItemFromLock is _get_item_from_lock: the additional attributes first,
// then the lock's own attributes over them (so a reserved name among the
// additional attributes is silently replaced).
func pyItemFromLock(n names, l *pyBaseLock) (map[string]types.AttributeValue, error) {
	lease, err := pyNumberFromFloat(l.LeaseDuration)
	if err != nil {
		return nil, err
	}
	item := make(map[string]types.AttributeValue, len(l.AdditionalAttributes)+6)
	for k, v := range l.AdditionalAttributes {
		item[k] = v
	}
	item[n.PK] = &types.AttributeValueMemberS{Value: l.PartitionKey}
	item[n.SK] = &types.AttributeValueMemberS{Value: l.SortKey}
	item[colOwnerName] = &types.AttributeValueMemberS{Value: l.OwnerName}
	item[colLeaseDuration] = &types.AttributeValueMemberN{Value: lease}
	item[colRVN] = &types.AttributeValueMemberS{Value: l.RecordVersionNumber}
	item[n.TTL] = &types.AttributeValueMemberN{Value: strconv.FormatInt(l.ExpiryTime, 10)}
	return item, nil
}

// errInexact is boto3's refusal (decimal.Inexact, from its serializer's
// 38-digit context) of a number it cannot send without rounding.
var errInexact = errors.New("decimal.Inexact: more than 38 significant digits")

// pyNumberFromFloat is what boto3 sends for Decimal.from_float(f): the
// float's exact decimal expansion — or, since boto3 serializes numbers in
// a 38-digit context that traps rounding, errInexact when the expansion
// is longer than 38 significant digits (0.1 and 0.3 are; 30, 0.5 and 0.25
// are not). Leases are positive and far from the exponent limits, so the
// exponent notation Python uses for tiny or huge numbers never arises.
func pyNumberFromFloat(f float64) (string, error) {
	exact := pyExactDecimal(f)
	if significantDigits(exact) > 38 {
		return "", fmt.Errorf("%w: Decimal.from_float(%v) = %s", errInexact, f, exact)
	}
	return exact, nil
}

// pyExactDecimal is str(Decimal.from_float(f)) for ordinary values: the
// exact value of the float. A float's denominator is a power of two, 2^k,
// so its expansion has at most k digits after the point.
func pyExactDecimal(f float64) string {
	r := new(big.Rat).SetFloat64(f)
	k := r.Denom().BitLen() - 1
	s := r.FloatString(k)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// significantDigits counts the digits of a plain decimal that Decimal
// keeps: all but the leading zeros (Decimal.from_float(30.0) has two,
// Decimal.from_float(0.5) one).
func significantDigits(s string) int {
	return len(strings.TrimLeft(strings.NewReplacer("-", "", ".", "").Replace(s), "0"))
}

func pyKey(n names, pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		n.PK: &types.AttributeValueMemberS{Value: pk},
		n.SK: &types.AttributeValueMemberS{Value: sk},
	}
}

func isCCF(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// pyQuote is urllib.parse.quote with its default safe characters.
func pyQuote(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_.-~/", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// uuid4 is str(uuid.uuid4()): 36 characters, dashed.
func uuid4() string {
	h := uuidHex()
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// uuidHex is uuid.uuid4().hex: 32 lowercase hex digits.
func uuidHex() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return hex.EncodeToString(b[:])
}
