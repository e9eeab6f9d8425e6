package ddblock

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/tracing"

	"github.com/ddblock/ddblock/internal/clock"
	"github.com/ddblock/ddblock/internal/timing"
	"github.com/ddblock/ddblock/internal/wire"
)

// Python's defaults, which are ddblock's.
const (
	DefaultTableName        = "DynamoDBLockTable"
	DefaultPartitionKeyName = "lock_key"
	DefaultSortKeyName      = "sort_key"
	DefaultTTLAttributeName = "expiry_time"
	DefaultSortKey          = "-"
	DefaultHeartbeatPeriod  = 5 * time.Second
	DefaultSafePeriod       = 20 * time.Second
	DefaultLeaseDuration    = 30 * time.Second
	DefaultExpiryPeriod     = time.Hour
	// DefaultHeartbeatTPS (-1) spreads each period's heartbeats evenly
	// over the period ("adaptive" in Python).
	DefaultHeartbeatTPS    = -1
	DefaultCallbackWorkers = 5
	// DefaultHeartbeatConcurrency bounds the heartbeats in flight at once.
	DefaultHeartbeatConcurrency = 64
)

// Options are a client's settings. [New] applies every option first and
// resolves the settings once, after the last, so that the order of the
// options never matters:
//
//   - a setting that no option set takes its default (python_dynamodb_lock's);
//   - of the four durations that depend on each other (HeartbeatPeriod,
//     SafePeriod, LeaseDuration, ExpiryPeriod), those not set are derived
//     from those set, in python_dynamodb_lock's proportions (5 s, 20 s,
//     30 s: a sixth and two thirds of the lease). The lease, if not set,
//     is the longest of 30 s, 3/2 of SafePeriod and 6 × HeartbeatPeriod
//     (those set); SafePeriod is two thirds of the lease; HeartbeatPeriod
//     a sixth of the lease or a quarter of the safe period, the shorter;
//     ExpiryPeriod 1 h or twice the lease, the longer, so that TTL never
//     deletes an item before its lease has run out. So set the lease
//     alone, and the heartbeat period and safe period follow it; a
//     heartbeat or safe period Python would run with its 30 s lease
//     keeps that lease;
//   - the settings are then checked as a whole, every problem reported at
//     once; two settings that contradict each other are refused with an
//     error naming both, and saying which were set and which derived.
//
// Options are set only through the With functions, each of which
// records that it set its field: WithHeartbeatPeriod(0) is refused
// rather than taken for "not set". [Client.Options] returns them
// resolved.
//
// Tuning: the lease is how long other clients wait on a silent holder; the
// heartbeat period should be at most a quarter of it, so that several
// heartbeats can fail before the lease runs out; the safe period sits
// between them, and is when the holder is told to stop working. The
// defaults (5 s heartbeat, 20 s safe, 30 s lease) follow that rule, and so
// does anything derived from one duration set alone.
type Options struct {
	// TableName is the lock table. Default "DynamoDBLockTable".
	TableName string
	// PartitionKeyName is the table's partition (HASH) key attribute, of
	// type S. Default "lock_key".
	PartitionKeyName string
	// SortKeyName is the table's sort (RANGE) key attribute, of type S.
	// Default "sort_key", or empty with PartitionKeyOnly; setting both it
	// (non-empty) and PartitionKeyOnly is refused.
	SortKeyName string
	// PartitionKeyOnly is for a table keyed by the partition key alone,
	// as the Java, Node and Go peers allow. Locks then have no sort key.
	// Default false: Python always uses a sort key.
	PartitionKeyOnly bool
	// TTLAttributeName is the attribute holding the epoch-seconds time
	// after which DynamoDB may delete an abandoned item. Default
	// "expiry_time".
	TTLAttributeName string
	// OwnerName identifies this client in the items it writes. Default:
	// the host name followed by 32 random hex digits, as Python does.
	OwnerName string
	// HeartbeatPeriod is how often each held lock is refreshed. Default
	// 5 s; when not set, a sixth of the lease or a quarter of the safe
	// period, the shorter (see [Options]). Must be below SafePeriod.
	HeartbeatPeriod time.Duration
	// SafePeriod is how long a held lock may go without a successful
	// heartbeat before it is declared in danger. Default 20 s; when not
	// set but another duration is, two thirds of the lease. Must be below
	// LeaseDuration.
	SafePeriod time.Duration
	// LeaseDuration is written into every lock this client takes: how
	// long others must see the lock unchanged before taking it over.
	// Default 30 s; when not set, the longest of 30 s, 3/2 of SafePeriod
	// (if set) and 6 times HeartbeatPeriod (if set). At most a year.
	LeaseDuration time.Duration
	// ExpiryPeriod sets the TTL attribute: now plus this, in whole epoch
	// seconds, refreshed by every heartbeat. Default 1 h, or twice the
	// lease if that is longer. Must be longer than LeaseDuration, so that
	// DynamoDB's TTL cannot delete a silent holder's item before its
	// lease has run out.
	ExpiryPeriod time.Duration
	// HeartbeatTPS is -1 (default) to spread each period's heartbeats
	// evenly over the period, or a positive number of heartbeats a second.
	HeartbeatTPS int
	// HeartbeatConcurrency bounds how many heartbeats may be in flight at
	// once. Default 64.
	HeartbeatConcurrency int
	// HeartbeatTimeout bounds each heartbeat call, and the clean-up calls
	// made on a context of their own (releases by Close and WithLock).
	// Default (and when set to 0): half the safe period, so that a slow
	// call may still land and keep its lock, while a hung one frees its
	// sender long before the lock is in danger.
	HeartbeatTimeout time.Duration
	// CallbackWorkers is the number of goroutines that run callbacks.
	// Default 5.
	CallbackWorkers int
	// FencingTokens makes every acquisition write a fencing token: a
	// number greater than that of every earlier acquisition of the key,
	// in the same conditional write that grants the lock (see
	// [Lock.FencingToken]). It turns on KeepReleasedItems, so that the
	// count survives releases; setting KeepReleasedItems false with it is
	// refused. Default false.
	FencingTokens bool
	// KeepReleasedItems makes a release mark the item released instead of
	// deleting it (the Java client's "delete on release = false"). Any
	// ddblock client may take a released item at once; a Python client
	// waits a lease first. DynamoDB's TTL removes it eventually. Default
	// false, as Python, or true with FencingTokens; an item that carries
	// a fencing token is kept whatever this says, so that no client
	// breaks the count.
	KeepReleasedItems bool
	// MaxClockSkew, when positive, turns on fast takeover: this client
	// stamps its wall clock into the items it writes, and takes over an
	// item whose stamp plus lease plus MaxClockSkew has passed by its own
	// wall clock, without first watching it for a whole lease. Safe only
	// if no two hosts' clocks differ by more than MaxClockSkew. Items
	// without a stamp (Python's, or from clients without this option) are
	// still timed by watching their version number. Default 0: off.
	MaxClockSkew time.Duration
	// SessionLease attaches every lock the client takes to one session
	// item, which the client heartbeats alone, once a period, whatever
	// the number of locks: one write a period per client, not one per
	// lock (as etcd leases and ZooKeeper sessions do). A lock item is then
	// written once, at its acquire, naming the session; other ddblock
	// clients take it over only after the session item, or its absence,
	// has stood unchanged for the session's lease (LeaseDuration). If the
	// session goes into danger, so does every lock on it; if it is lost,
	// so is every lock on it. Locks with and without sessions share a
	// table. For tables that only ddblock clients use:
	// python_dynamodb_lock sees a session's lock as held for a year (see
	// doc/migrating-from-python.md). Default false.
	SessionLease bool
	// MaxObservations bounds how many held-by-others locks, and how many
	// sessions of other clients, the client remembers between calls (the
	// version number seen and when), so that a later AcquireLock or
	// TryAcquireLock can take over a stale lock, or every lock of a dead
	// session, without watching it anew. Default 10,000.
	MaxObservations int
	// Metrics receives measurements; see [Metrics]. Default: none.
	Metrics Metrics
	// Logger receives the client's log records. Default slog.Default().
	Logger *slog.Logger
}

// settings are what the options of [New] write: the client's Options,
// which settings an option set (so that one set to its zero value is
// refused rather than taken for "not set"), and the clock.
type settings struct {
	Options
	set    settingSet
	clock  clock.Clock
	tracer tracing.TracerProvider
}

// settingSet is a set of settings of [Options], one bit each: those whose
// zero value is refused when set, rather than taken for "not set".
type settingSet uint32

const (
	setTableName settingSet = 1 << iota
	setPartitionKeyName
	setSortKeyName
	setTTLAttributeName
	setHeartbeatPeriod
	setSafePeriod
	setLeaseDuration
	setExpiryPeriod
	setHeartbeatTPS
	setHeartbeatConcurrency
	setCallbackWorkers
	setKeepReleasedItems
	setMaxObservations
)

func (s settingSet) has(x settingSet) bool { return s&x != 0 }

// Option changes one setting of [Options]; the With functions make
// them. Options are resolved after the last one has run (see [Options]):
// their order does not matter.
type Option func(*settings)

// WithTableName sets [Options.TableName], the lock table a client uses.
// (The table helpers take [WithNamesFromOptions] instead.)
func WithTableName(name string) Option {
	return func(o *settings) { o.TableName, o.set = name, o.set|setTableName }
}

// WithPartitionKeyName sets [Options.PartitionKeyName].
func WithPartitionKeyName(name string) Option {
	return func(o *settings) { o.PartitionKeyName, o.set = name, o.set|setPartitionKeyName }
}

// WithSortKeyName sets [Options.SortKeyName]: the name of the table's
// sort key attribute. (A lock's sort key value is an acquire option,
// [WithSortKeyValue].)
func WithSortKeyName(name string) Option {
	return func(o *settings) { o.SortKeyName, o.set = name, o.set|setSortKeyName }
}

// WithTTLAttributeName sets [Options.TTLAttributeName].
func WithTTLAttributeName(name string) Option {
	return func(o *settings) { o.TTLAttributeName, o.set = name, o.set|setTTLAttributeName }
}

// WithOwnerName sets [Options.OwnerName]; empty keeps the default.
func WithOwnerName(name string) Option { return func(o *settings) { o.OwnerName = name } }

// WithHeartbeatPeriod sets [Options.HeartbeatPeriod]. Set alone, it keeps
// Python's 30 s lease and 20 s safe period, unless it is longer than 5 s:
// then the lease is 6 times as long and the safe period 4 times (see
// [Options]).
func WithHeartbeatPeriod(d time.Duration) Option {
	return func(o *settings) { o.HeartbeatPeriod, o.set = d, o.set|setHeartbeatPeriod }
}

// WithSafePeriod sets [Options.SafePeriod]. Set without a lease, it keeps
// Python's 30 s lease unless it is longer than 20 s: then the lease is 3/2
// as long. The heartbeat period, unless set, is a sixth of the lease or a
// quarter of the safe period, the shorter (see [Options]).
func WithSafePeriod(d time.Duration) Option {
	return func(o *settings) { o.SafePeriod, o.set = d, o.set|setSafePeriod }
}

// WithLeaseDuration sets [Options.LeaseDuration]. The heartbeat period
// and safe period, unless set, follow it: a sixth and two thirds of it
// (see [Options]). So WithLeaseDuration(12*time.Second) alone gives
// a 2 s heartbeat and an 8 s safe period.
func WithLeaseDuration(d time.Duration) Option {
	return func(o *settings) { o.LeaseDuration, o.set = d, o.set|setLeaseDuration }
}

// WithExpiryPeriod sets [Options.ExpiryPeriod].
func WithExpiryPeriod(d time.Duration) Option {
	return func(o *settings) { o.ExpiryPeriod, o.set = d, o.set|setExpiryPeriod }
}

// WithHeartbeatTPS sets [Options.HeartbeatTPS].
func WithHeartbeatTPS(tps int) Option {
	return func(o *settings) { o.HeartbeatTPS, o.set = tps, o.set|setHeartbeatTPS }
}

// WithHeartbeatConcurrency sets [Options.HeartbeatConcurrency].
func WithHeartbeatConcurrency(n int) Option {
	return func(o *settings) { o.HeartbeatConcurrency, o.set = n, o.set|setHeartbeatConcurrency }
}

// WithHeartbeatTimeout sets [Options.HeartbeatTimeout]; 0 keeps the
// default.
func WithHeartbeatTimeout(d time.Duration) Option {
	return func(o *settings) { o.HeartbeatTimeout = d }
}

// WithCallbackWorkers sets [Options.CallbackWorkers].
func WithCallbackWorkers(n int) Option {
	return func(o *settings) { o.CallbackWorkers, o.set = n, o.set|setCallbackWorkers }
}

// WithPartitionKeyOnly sets [Options.PartitionKeyOnly], for a table
// without a sort key. Do not combine it with [WithSortKeyName].
func WithPartitionKeyOnly() Option { return func(o *settings) { o.PartitionKeyOnly = true } }

// WithFencingTokens sets [Options.FencingTokens] (and with it, unless set
// otherwise, which is refused, [Options.KeepReleasedItems]).
func WithFencingTokens() Option { return func(o *settings) { o.FencingTokens = true } }

// WithKeepReleasedItems sets [Options.KeepReleasedItems].
func WithKeepReleasedItems(keep bool) Option {
	return func(o *settings) { o.KeepReleasedItems, o.set = keep, o.set|setKeepReleasedItems }
}

// WithMaxClockSkew sets [Options.MaxClockSkew].
func WithMaxClockSkew(d time.Duration) Option { return func(o *settings) { o.MaxClockSkew = d } }

// WithSessionLease sets [Options.SessionLease]: the client's locks are
// kept alive by one session item, one heartbeat write a period per
// client.
func WithSessionLease() Option { return func(o *settings) { o.SessionLease = true } }

// WithMaxObservations sets [Options.MaxObservations].
func WithMaxObservations(n int) Option {
	return func(o *settings) { o.MaxObservations, o.set = n, o.set|setMaxObservations }
}

// WithMetrics sets [Options.Metrics].
func WithMetrics(m Metrics) Option { return func(o *settings) { o.Metrics = m } }

// WithTracerProvider makes the client trace its work through tp, the
// tracer provider type the AWS SDK's dynamodb.Options.TracerProvider
// takes: a span for each acquire, release, guarded write and election
// term, started from the context the call was given, and a span when a
// lock goes into danger or is stolen, in the trace of the context its
// acquire was given (doc/metrics.md lists them). The DynamoDB calls of
// those operations carry their span's context, so that the SDK's own
// spans nest under ddblock's when the SDK client traces through the
// same provider. The module github.com/ddblock/ddblock/otel adapts
// OpenTelemetry's providers. Default: no tracing; nil is no tracing.
func WithTracerProvider(tp tracing.TracerProvider) Option {
	return func(o *settings) { o.tracer = tp }
}

// WithLogger sets [Options.Logger].
func WithLogger(l *slog.Logger) Option { return func(o *settings) { o.Logger = l } }

// withClock sets the client's clock: the fake one of tests, the ddblock
// command's (internal/hooks).
func withClock(c clock.Clock) Option { return func(o *settings) { o.clock = c } }

// defaultSettings returns the settings of a client given no option.
func defaultSettings() settings {
	var o settings
	_ = o.resolve()
	return o
}

// DefaultMaxObservations bounds the remembered observations of locks held
// by others.
const DefaultMaxObservations = 10000

// given returns the settings an option set: those a With function
// recorded, and those any option left at a non-zero value.
func (o *settings) given() settingSet {
	s := o.set
	for _, f := range []struct {
		bit     settingSet
		nonZero bool
	}{
		{setTableName, o.TableName != ""},
		{setPartitionKeyName, o.PartitionKeyName != ""},
		{setSortKeyName, o.SortKeyName != ""},
		{setTTLAttributeName, o.TTLAttributeName != ""},
		{setHeartbeatPeriod, o.HeartbeatPeriod != 0},
		{setSafePeriod, o.SafePeriod != 0},
		{setLeaseDuration, o.LeaseDuration != 0},
		{setExpiryPeriod, o.ExpiryPeriod != 0},
		{setHeartbeatTPS, o.HeartbeatTPS != 0},
		{setHeartbeatConcurrency, o.HeartbeatConcurrency != 0},
		{setCallbackWorkers, o.CallbackWorkers != 0},
		{setKeepReleasedItems, o.KeepReleasedItems},
		{setMaxObservations, o.MaxObservations != 0},
	} {
		if f.nonZero {
			s |= f.bit
		}
	}
	return s
}

// resolve turns the settings the options left into those the client
// uses, once, after every option has run, so that the options' order
// cannot change the outcome: it fills the defaults of what no option set,
// derives the durations not set from those set, then checks the whole,
// returning every problem at once.
func (o *settings) resolve() []error {
	given := o.given()
	o.set = given
	for _, n := range []struct {
		bit   settingSet
		field *string
		def   string
	}{
		{setTableName, &o.TableName, DefaultTableName},
		{setPartitionKeyName, &o.PartitionKeyName, DefaultPartitionKeyName},
		{setSortKeyName, &o.SortKeyName, DefaultSortKeyName},
		{setTTLAttributeName, &o.TTLAttributeName, DefaultTTLAttributeName},
	} {
		if !given.has(n.bit) {
			*n.field = n.def
		}
	}
	if o.PartitionKeyOnly && !given.has(setSortKeyName) {
		o.SortKeyName = ""
	}
	for _, n := range []struct {
		bit   settingSet
		field *int
		def   int
	}{
		{setHeartbeatTPS, &o.HeartbeatTPS, DefaultHeartbeatTPS},
		{setHeartbeatConcurrency, &o.HeartbeatConcurrency, DefaultHeartbeatConcurrency},
		{setCallbackWorkers, &o.CallbackWorkers, DefaultCallbackWorkers},
		{setMaxObservations, &o.MaxObservations, DefaultMaxObservations},
	} {
		if !given.has(n.bit) {
			*n.field = n.def
		}
	}
	if o.FencingTokens && !given.has(setKeepReleasedItems) {
		o.KeepReleasedItems = true
	}
	origins := o.deriveTiming(given)
	if errs := o.check(origins); len(errs) > 0 {
		return errs
	}
	if o.HeartbeatTimeout == 0 {
		o.HeartbeatTimeout = o.SafePeriod / 2
	}
	if o.OwnerName == "" {
		o.OwnerName = wire.DefaultOwnerName()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.clock == nil {
		o.clock = clock.NewSystem()
	}
	if o.Metrics == nil {
		o.Metrics = NoMetrics{}
	}
	return nil
}

// deriveTiming fills the durations no option set (see [Options]), from
// those set. A duration set but not positive stays as set, to be refused,
// and derives nothing.
func (o *settings) deriveTiming(given settingSet) timing.Origins {
	fields := [...]struct {
		bit   settingSet
		field *time.Duration
	}{
		{setHeartbeatPeriod, &o.HeartbeatPeriod},
		{setSafePeriod, &o.SafePeriod},
		{setLeaseDuration, &o.LeaseDuration},
		{setExpiryPeriod, &o.ExpiryPeriod},
	}
	var in [len(fields)]time.Duration
	for i, f := range fields {
		if given.has(f.bit) {
			in[i] = *f.field
		}
	}
	t, origins := timing.Derive(timing.Durations{HeartbeatPeriod: in[0], SafePeriod: in[1], LeaseDuration: in[2], ExpiryPeriod: in[3]},
		DefaultLeaseDuration, DefaultExpiryPeriod)
	out := [...]time.Duration{t.HeartbeatPeriod, t.SafePeriod, t.LeaseDuration, t.ExpiryPeriod}
	for i, f := range fields {
		if !given.has(f.bit) {
			*f.field = out[i]
		}
	}
	return origins
}

// check lists every setting that cannot work, and every pair of settings
// that cannot work together. origins says which durations were derived,
// and from what, for the messages.
func (o *settings) check(origins timing.Origins) []error {
	var errs []error
	bad := func(setting, format string, args ...any) {
		errs = append(errs, invalidArg(setting, fmt.Sprintf(format, args...)))
	}
	for _, n := range []struct{ setting, value string }{
		{"TableName", o.TableName},
		{"PartitionKeyName", o.PartitionKeyName},
		{"SortKeyName", o.SortKeyName},
		{"TTLAttributeName", o.TTLAttributeName},
	} {
		if n.value == "" {
			if n.setting == "SortKeyName" && o.PartitionKeyOnly {
				continue
			}
			bad(n.setting, "must not be empty")
		} else if len(n.value) > maxNameLen {
			bad(n.setting, "longer than DynamoDB's %d bytes", maxNameLen)
		}
	}
	if o.TableName != "" && (len(o.TableName) < 3 || !validTableName(o.TableName)) {
		bad("TableName", "%q is not a DynamoDB table name (3-255 of a-z A-Z 0-9 _ - .)", o.TableName)
	}
	names := map[string]string{}
	for _, n := range []struct{ setting, value string }{
		{"PartitionKeyName", o.PartitionKeyName},
		{"SortKeyName", o.SortKeyName},
		{"TTLAttributeName", o.TTLAttributeName},
	} {
		if n.value == "" {
			continue
		}
		if other, dup := names[n.value]; dup {
			bad(n.setting, "%q is also the %s", n.value, other)
		}
		if isLockAttribute(n.value) {
			bad(n.setting, "%q is an attribute of the lock item", n.value)
		}
		names[n.value] = n.setting
	}
	if o.PartitionKeyOnly && o.SortKeyName != "" {
		bad("SortKeyName", "%q and PartitionKeyOnly exclude each other (both set): a table keyed by the partition key alone has no sort key", o.SortKeyName)
	}

	durations := []struct {
		setting string
		value   time.Duration
		origin  timing.Origin
	}{
		{"HeartbeatPeriod", o.HeartbeatPeriod, origins.Heartbeat},
		{"SafePeriod", o.SafePeriod, origins.Safe},
		{"LeaseDuration", o.LeaseDuration, origins.Lease},
		{"ExpiryPeriod", o.ExpiryPeriod, origins.Expiry},
	}
	for _, d := range durations {
		if d.value <= 0 {
			bad(d.setting, "must be positive, got %v%s", d.value, d.origin.Note())
		}
	}
	// Each duration must be below the next (ExpiryPeriod above
	// LeaseDuration: DynamoDB's TTL must not delete a silent holder's item
	// before its lease has run out).
	for i := range len(durations) - 1 {
		lo, hi := durations[i], durations[i+1]
		if lo.value <= 0 || hi.value <= 0 || lo.value < hi.value {
			continue
		}
		setting, how := lo.setting, "both set"
		switch {
		case lo.origin.Derived() && hi.origin.Derived():
			how = fmt.Sprintf("%s %s; %s %s", lo.setting, lo.origin.How, hi.setting, hi.origin.How)
		case lo.origin.Derived():
			setting, how = hi.setting, fmt.Sprintf("%s not set: %s", lo.setting, lo.origin.How)
		case hi.origin.Derived():
			how = fmt.Sprintf("%s not set: %s", hi.setting, hi.origin.How)
		}
		bad(setting, "%s %v must be below %s %v (%s)", lo.setting, lo.value, hi.setting, hi.value, how)
	}
	if o.LeaseDuration > maxLease {
		if origins.Lease.Derived() && origins.Lease.From != "" {
			bad(origins.Lease.From, "gives a LeaseDuration of %v (%s), longer than the %v this library supports", o.LeaseDuration, origins.Lease.How, maxLease)
		} else {
			bad("LeaseDuration", "%v is longer than the %v this library supports", o.LeaseDuration, maxLease)
		}
	}
	if o.HeartbeatTPS == 0 || o.HeartbeatTPS < -1 {
		bad("HeartbeatTPS", "must be -1 (adaptive) or positive, got %d", o.HeartbeatTPS)
	}
	if o.HeartbeatConcurrency <= 0 {
		bad("HeartbeatConcurrency", "must be positive, got %d", o.HeartbeatConcurrency)
	}
	if o.HeartbeatTimeout < 0 {
		bad("HeartbeatTimeout", "must not be negative, got %v", o.HeartbeatTimeout)
	}
	if o.CallbackWorkers <= 0 {
		bad("CallbackWorkers", "must be positive, got %d", o.CallbackWorkers)
	}
	if o.MaxClockSkew < 0 {
		bad("MaxClockSkew", "must not be negative, got %v", o.MaxClockSkew)
	}
	if o.MaxObservations <= 0 {
		bad("MaxObservations", "must be positive, got %d", o.MaxObservations)
	}
	if o.FencingTokens && !o.KeepReleasedItems {
		bad("KeepReleasedItems", "false and FencingTokens exclude each other (both set): fencing tokens need released items kept, or the count restarts after every release")
	}
	return errs
}

const (
	maxNameLen = 255
	// maxLease keeps lease arithmetic far from overflow.
	maxLease = 365 * 24 * time.Hour
)

func validTableName(s string) bool {
	if len(s) > 255 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
		default:
			return false
		}
	}
	return true
}

// acquireOptions are the settings of one acquire, which the
// AcquireOption values of [Client.AcquireLock], [Client.TryAcquireLock],
// [Client.WithLock] and [Semaphore.Acquire] write.
type acquireOptions struct {
	SortKey              string
	RetryPeriod          time.Duration
	RetryTimeout         time.Duration
	AdditionalAttributes map[string]types.AttributeValue
	Callback             Callback
	WaitOnOwn            bool
	FairWaiting          bool
	// traceCtx is the context the acquire was given, kept by the lock
	// for the span of its loss (spans.go); nil without a tracer. No
	// option sets it.
	traceCtx context.Context
}

// AcquireOption changes one setting of an acquire; the With functions
// below make them.
type AcquireOption func(*acquireOptions)

// WithSortKeyValue sets the lock's sort key value: "-" by default, and
// empty on a client with PartitionKeyOnly. (The name of the sort key
// attribute is a client option, [WithSortKeyName].)
func WithSortKeyValue(sortKey string) AcquireOption {
	return func(o *acquireOptions) { o.SortKey = sortKey }
}

// WithRetryPeriod sets how long to wait between attempts while the lock
// is held by someone else. Default: the client's heartbeat period.
func WithRetryPeriod(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.RetryPeriod = d }
}

// WithRetryTimeout sets how long to keep trying before ACQUIRE_TIMEOUT.
// Default: the client's lease duration plus its heartbeat period, so
// that a lock abandoned just before the call can still be taken over.
// The context's deadline also ends the wait. It bounds the whole wait
// however long each call takes (throttled, with the SDK backing off, or
// hung): a call in flight when it runs out is cut the client's
// HeartbeatTimeout later at the most.
func WithRetryTimeout(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.RetryTimeout = d }
}

// WithAdditionalAttributes sets attributes stored with the lock, which
// survive heartbeats. Names of the lock's own attributes are refused.
func WithAdditionalAttributes(attrs map[string]types.AttributeValue) AcquireOption {
	return func(o *acquireOptions) { o.AdditionalAttributes = attrs }
}

// WithFairWaiting makes the acquire wait its turn in the key's line of
// fair waiters: among the fair waiters of one key (or of one semaphore),
// the lock goes to the one that came first. Clients that do not wait in
// line may take it ahead of the line; mutual exclusion is never at
// stake. Waiters that die, pause past their client's lease, are
// cancelled or leave garbage behind are skipped within a bound. It costs
// four writes a wait (a number, a ticket, handing the turn on, the
// ticket's delete), one read of the line per retry period per client and
// key, and a session item per client while it waits. TryAcquireLock,
// TryAcquire and an acquire with a zero retry timeout ignore it: a try
// takes no place in line, and takes a free lock whatever waits in line.
// [Client.AcquireLocks] waits in the line of each of its keys in turn.
// See doc/waiting.md.
func WithFairWaiting() AcquireOption {
	return func(o *acquireOptions) { o.FairWaiting = true }
}

// WithCallback sets the function told when the lock is in danger, stolen,
// or recovers. It runs on the client's callback workers.
func WithCallback(cb Callback) AcquireOption {
	return func(o *acquireOptions) { o.Callback = cb }
}

// releaseOptions are the settings of one release.
type releaseOptions struct {
	BestEffort bool
}

// ReleaseOption changes one setting of a release; [WithBestEffort]
// makes them.
type ReleaseOption func(*releaseOptions)

// WithBestEffort sets whether a release is best effort: by default it
// is, logging and swallowing every failure; WithBestEffort(false) makes
// it report LOCK_NOT_OWNED, LOCK_STOLEN or UNKNOWN.
func WithBestEffort(bestEffort bool) ReleaseOption {
	return func(o *releaseOptions) { o.BestEffort = bestEffort }
}
