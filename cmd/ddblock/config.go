package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/logging"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/wire"
)

// tableEnv names the variable that sets --table's default. `ddblock run`
// also sets it for its command, so a ddblock started by that command
// looks at the same table.
const tableEnv = "DDBLOCK_TABLE"

// fallbackRegion is used with a custom endpoint when no region is
// configured: local servers accept any region, and SigV4 needs one.
const fallbackRegion = "us-east-1"

// connFlags are the flags every subcommand that talks to DynamoDB shares:
// where the table is and how its items are named.
type connFlags struct {
	endpoint, region, profile string
	table, pkName, skName     string
	ttlName                   string
	// pkOnly: the table is keyed by the partition key alone.
	pkOnly bool
	// debug shows the library's and the AWS SDK's debug records.
	debug  bool
	stderr io.Writer
	f      *cmdFlags
	// sdk is the SDK client under the last client made: get and release
	// read a line's counter and tickets with it as they are stored, which
	// the library shows only in part (lines.go).
	sdk *dynamodb.Client
}

func (c *connFlags) register(f *cmdFlags) {
	table := f.env.getenv(tableEnv)
	if table == "" {
		table = ddblock.DefaultTableName
	}
	f.StringVar(&c.endpoint, "endpoint", "", "DynamoDB endpoint `URL`, such as http://127.0.0.1:8000 for a local server\n(default: the SDK's, which honours AWS_ENDPOINT_URL_DYNAMODB and AWS_ENDPOINT_URL)")
	f.StringVar(&c.region, "region", "", "AWS `region` (default: the SDK's chain: AWS_REGION, the profile's region)")
	f.StringVar(&c.profile, "profile", "", "shared config `profile` (default: AWS_PROFILE, or \"default\")")
	f.StringVar(&c.table, "table", table, "lock `table` name; "+tableEnv+" sets the default")
	f.StringVar(&c.pkName, "partition-key-name", ddblock.DefaultPartitionKeyName, "the table's partition key attribute")
	f.StringVar(&c.skName, "sort-key-name", ddblock.DefaultSortKeyName, "the table's sort key attribute")
	f.StringVar(&c.ttlName, "ttl-attribute-name", ddblock.DefaultTTLAttributeName, "the TTL attribute")
	f.BoolVar(&c.pkOnly, "partition-key-only", false, "the table has a partition key and no sort key (locks are then named by KEY alone)")
	f.BoolVar(&c.debug, "debug", false, "log the library's and the AWS SDK's debug records on stderr (retries, requests, responses)")
	c.stderr = f.env.stderr
	c.f = f
}

// check refuses flags that contradict each other; every command calls it
// after parsing, before anything is sent to DynamoDB.
func (c *connFlags) check() error {
	if c.pkOnly && c.f.isSet("sort-key-name") {
		return usageError("--sort-key-name and --partition-key-only exclude each other: a partition-key-only table has no sort key")
	}
	return nil
}

// sortKeyVar registers a command's --sort-key flag.
func (c *connFlags) sortKeyVar(p *string) {
	c.f.StringVar(p, "sort-key", ddblock.DefaultSortKey, "the lock's sort key (none with --partition-key-only)")
}

// names are the table and attribute names as client options.
func (c *connFlags) names() []ddblock.Option {
	opts := []ddblock.Option{
		ddblock.WithTableName(c.table),
		ddblock.WithPartitionKeyName(c.pkName),
		ddblock.WithTTLAttributeName(c.ttlName),
	}
	// The library refuses a sort key name on a partition-key-only table
	// (check has refused --sort-key-name with --partition-key-only).
	if c.pkOnly {
		opts = append(opts, ddblock.WithPartitionKeyOnly())
	} else {
		opts = append(opts, ddblock.WithSortKeyName(c.skName))
	}
	return opts
}

// tableNames are the table and attribute names as table options.
func (c *connFlags) tableNames() ddblock.Options {
	return ddblock.Options{
		TableName:        c.table,
		PartitionKeyName: c.pkName,
		SortKeyName:      c.skName,
		TTLAttributeName: c.ttlName,
		PartitionKeyOnly: c.pkOnly,
	}
}

// keyNames describes the table's keys, for messages.
func (c *connFlags) keyNames() string {
	if c.pkOnly {
		return c.pkName + " (no sort key)"
	}
	return c.pkName + ", " + c.skName
}

// dynamo returns an SDK client configured the AWS way: the default chain
// of environment, shared config and credentials, then the flags.
func (c *connFlags) dynamo(ctx context.Context) (*dynamodb.Client, error) {
	var loadOpts []func(*config.LoadOptions) error
	if c.profile != "" {
		loadOpts = append(loadOpts, config.WithSharedConfigProfile(c.profile))
	}
	if c.region != "" {
		loadOpts = append(loadOpts, config.WithRegion(c.region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fail(exitUsage, "loading the AWS configuration: %v", err)
	}
	// The SDK logs through the CLI's logger, never straight to stderr.
	cfg.Logger = sdkLogger{c.logger()}
	cfg.ClientLogMode = 0
	if c.debug {
		cfg.ClientLogMode = aws.LogRetries | aws.LogRequest | aws.LogResponse
	}
	ddb := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if c.endpoint != "" {
			o.BaseEndpoint = aws.String(c.endpoint)
		}
	})
	if ddb.Options().Region == "" {
		if ddb.Options().BaseEndpoint == nil {
			return nil, usageError("no AWS region: set AWS_REGION, a region in the profile, or --region")
		}
		ddb = dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
			o.Region = fallbackRegion
			if c.endpoint != "" {
				o.BaseEndpoint = aws.String(c.endpoint)
			}
		})
	}
	return ddb, nil
}

// logger is the CLI's logger on stderr: warnings, and debug records too
// with --debug.
func (c *connFlags) logger() *slog.Logger {
	w := c.stderr
	if w == nil {
		w = io.Discard
	}
	level := slog.LevelWarn
	if c.debug {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// sdkLogger hands the AWS SDK's log records to the CLI's logger, which
// shows warnings as its own and debug records with --debug only.
type sdkLogger struct{ log *slog.Logger }

func (l sdkLogger) Logf(class logging.Classification, format string, v ...any) {
	msg := secretHeaders.ReplaceAllString(fmt.Sprintf(format, v...), "$1: [redacted]")
	level := slog.LevelDebug
	if class == logging.Warn && !spuriousChecksumWarning(v) {
		level = slog.LevelWarn
	}
	l.log.Log(context.Background(), level, "aws sdk: "+msg)
}

// secretHeaders are the lines of a logged request that carry a
// credential (a session token) or a signature: --debug output gets
// pasted into tickets.
var secretHeaders = regexp.MustCompile(`(?im)^(authorization|x-amz-security-token):[^\r\n]*`)

// spuriousChecksumWarning recognises the SDK's "failed to close HTTP
// response body ...: response did not match expected checksum, 0, N"
// about a response that carried no x-amz-crc32 header at all. The
// DynamoDB client checks every response body against that header, and
// when it is missing it compares against 0 and warns on Close, after the
// response was read and used (an open aws-sdk-go-v2 issue). Real
// DynamoDB sends the header; DynamoDB Local leaves it off its error
// responses (a missing table, a failed condition), so the warning comes
// with every such answer and says nothing about the data. It is kept for
// --debug; a mismatch against a checksum the server did send (expected
// not 0) stays a warning.
func spuriousChecksumWarning(v []any) bool {
	for _, a := range v {
		if err, ok := a.(error); ok && strings.HasPrefix(err.Error(), "response did not match expected checksum, 0, ") {
			return true
		}
	}
	return false
}

// client returns a lock client on the table; close it with closeClient.
func (c *connFlags) client(ctx context.Context, log *slog.Logger, opts ...ddblock.Option) (*ddblock.Client, error) {
	ddb, err := c.dynamo(ctx)
	if err != nil {
		return nil, err
	}
	if c.debug {
		// The caller's logger shows warnings; --debug asks for more.
		log = c.logger()
	}
	all := append(c.names(), ddblock.WithLogger(log))
	client, err := ddblock.New(ddb, append(all, opts...)...)
	if err != nil {
		return nil, libError(err, c.table)
	}
	c.sdk = ddb
	return client, nil
}

// closeTimeout bounds the wait for a client's background work to end.
const closeTimeout = 10 * time.Second

// closeClient closes a client that holds no lock any more.
func closeClient(client *ddblock.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = client.Close(ctx, false)
}

// closeClientEndingSession closes a client with sessions, releasing what
// it still holds and deleting its session item.
func closeClientEndingSession(client *ddblock.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = client.Close(ctx, true)
}

// logger returns the logger handed to the library: its warnings (failed
// heartbeats, a lock in danger) are worth an operator's eyes on stderr.
func logger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// libError turns a library error into an exit status and one line.
func libError(err error, table string) error {
	err = trimmed{err}
	var e *ddblock.Error
	if ddblock.CodeOf(err) == ddblock.CodeAccessDenied || wire.AccessDenied(err) {
		// Refused by AWS: asking again cannot help. The cause's text
		// names the operation and carries AWS's message, which names
		// the action that is not allowed.
		return fail(exitNoPerm, "%v", err)
	}
	if !errors.As(err, &e) {
		if errors.Is(err, context.Canceled) {
			return fail(exitSignalBase+2, "interrupted")
		}
		return fail(exitUnavailable, "%v", err)
	}
	switch e.Code {
	case ddblock.CodeInvalidArgument:
		// Settings or arguments that cannot work.
		return fail(exitUsage, "%v", err)
	case ddblock.CodeTableUnsafe:
		// The library's advice names its option; ddblock's is a flag.
		return fail(exitConfig, "%s", strings.Replace(err.Error(), "say so with WithSingleRegionWrites", "say so with --single-region-writes", 1))
	case ddblock.CodeTableMismatch, ddblock.CodeSemaphoreMismatch:
		// The table exists, but not as configured; or a semaphore has
		// another number of slots than the one given.
		return fail(exitConfig, "%v", err)
	case ddblock.CodeTransactionsUnsupported:
		// The server cannot do what was asked (dynalite has no
		// transactions); nothing was written.
		return fail(exitUnavailable, "%v", err)
	case ddblock.CodeTableNotFound:
		return fail(exitUnavailable, "table %q does not exist (create it with: ddblock create-table --table %s)", table, table)
	case ddblock.CodeAcquireTimeout, ddblock.CodeTransactionConflict:
		// Not acquired within the wait: held, or, for a set of keys,
		// other writes kept changing its items.
		return fail(exitBusy, "%v", err)
	case ddblock.CodeLockNotFound:
		return fail(exitNotFound, "no lock %s in table %q", lockName(e.PartitionKey, e.SortKey), table)
	case ddblock.CodeInvalidItem:
		// Data another client wrote that ddblock cannot read.
		return fail(exitDataErr, "%v", err)
	case ddblock.CodeCanceled:
		return fail(exitSignalBase+2, "interrupted")
	case ddblock.CodeUnknown:
		// A DynamoDB call failed: unreachable, throttled, refused.
		return fail(exitUnavailable, "%v", err)
	case ddblock.CodeLockInDanger:
		// An acquire on a session (--session) whose heartbeats had not
		// landed for the safe period through its last attempt: no lock
		// is put on such a session. DynamoDB was unreachable or slow, or
		// ddblock was stopped; either way, nothing was acquired and a
		// later try may succeed.
		return fail(exitUnavailable, "%v", err)
	default:
		return fail(exitInternal, "%v", err)
	}
}

// trimmed drops the library's "ddblock: " prefix, which would follow
// ddblock's own "ddblock COMMAND: ".
type trimmed struct{ error }

func (t trimmed) Error() string { return strings.TrimPrefix(t.error.Error(), "ddblock: ") }
func (t trimmed) Unwrap() error { return t.error }

// isResourceInUse recognises CreateTable's "table already exists".
func isResourceInUse(err error) bool {
	var riu *types.ResourceInUseException
	return errors.As(err, &riu)
}
