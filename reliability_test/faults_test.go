package reliability

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
	"github.com/ddblock/ddblock/internal/hooks"
)

// These tests drive acquire, heartbeat and release through a fault proxy.
// The retrying is the AWS SDK's own (ddbtest.Server.ClientFor with a number of
// attempts); ddblock must honour its deadlines and contexts and, when it
// gives up, say so with a *ddblock.Error that wraps the cause.

// faulty is a client whose every call goes through its own proxy.
type faulty struct {
	*ddblock.Client
	proxy *faultproxy.Proxy
}

func (e *env) faulty(attempts int, opts ...ddblock.Option) faulty {
	e.t.Helper()
	p := e.proxy()
	return faulty{e.client(ddbtest.Shared(e.t).ClientFor(p.URL(), attempts), opts...), p}
}

// errorKinds are the faults that answer in the server's place, and a
// dropped connection; the SDK retries all of them.
var errorKinds = []faultproxy.Kind{faultproxy.Throttling, faultproxy.ThroughputExceeded, faultproxy.ServerError, faultproxy.Drop}

// wantCode fails the test unless err is a *ddblock.Error of code.
func wantCode(t *testing.T, err error, code ddblock.Code) *ddblock.Error {
	t.Helper()
	var lerr *ddblock.Error
	if !errors.As(err, &lerr) {
		t.Fatalf("error %v (%T) is not a *ddblock.Error", err, err)
	}
	if lerr.Code != code {
		t.Fatalf("error %v has code %s, want %s", err, lerr.Code, code)
	}
	return lerr
}

// wantCause fails the test unless err wraps the error the proxy injected.
func wantCause(t *testing.T, err error, kind faultproxy.Kind) {
	t.Helper()
	var api smithy.APIError
	switch kind {
	case faultproxy.Throttling:
		if !errors.As(err, &api) || api.ErrorCode() != "ThrottlingException" {
			t.Errorf("error %v does not wrap the ThrottlingException", err)
		}
	case faultproxy.ThroughputExceeded:
		var pte *types.ProvisionedThroughputExceededException
		if !errors.As(err, &pte) {
			t.Errorf("error %v does not wrap the ProvisionedThroughputExceededException", err)
		}
	case faultproxy.ServerError:
		if !errors.As(err, &api) || api.ErrorCode() != "InternalServerError" {
			t.Errorf("error %v does not wrap the InternalServerError", err)
		}
	case faultproxy.Drop:
		if errors.As(err, &api) || errors.Unwrap(err) == nil {
			t.Errorf("error %v does not wrap a connection error", err)
		}
	}
}

func TestAcquireRetriesThroughFaults(t *testing.T) {
	for _, kind := range errorKinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := e.faulty(2)
			f := c.proxy.MustInject(faultproxy.Rule{Kind: kind, Op: "PutItem", Count: 1})
			lock, err := c.AcquireLock(context.Background(), "k")
			if err != nil {
				t.Fatalf("AcquireLock with one %s and two attempts: %v", kind, err)
			}
			if f.Injected() != 1 || lock.Err() != nil {
				t.Errorf("injected %d, lock error %v; want 1, nil", f.Injected(), lock.Err())
			}
			info, err := c.GetLock(context.Background(), "k", "")
			if err != nil || info.RecordVersionNumber != lock.RecordVersionNumber() {
				t.Errorf("stored lock %+v, %v; want version %s", info, err, lock.RecordVersionNumber())
			}
		})
	}
}

func TestAcquireGivesUpWithTypedError(t *testing.T) {
	for _, kind := range errorKinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := e.faulty(2)
			c.proxy.MustInject(faultproxy.Rule{Kind: kind, Op: "PutItem"})
			_, err := c.AcquireLock(context.Background(), "k",
				ddblock.WithRetryPeriod(time.Second), ddblock.WithRetryTimeout(2*time.Second))
			// Each attempt uses up the SDK's two; ddblock tries again at
			// every retry period (0, 1 and 2 s) still to come when the
			// last attempt ended (the SDK's back-off between its two may
			// use up a slot: the timeout counts time), and, when the last
			// attempt failed too, ends the acquire with UNKNOWN and the
			// cause.
			lerr := wantCode(t, err, ddblock.CodeUnknown)
			if lerr.PartitionKey != "k" {
				t.Errorf("error %v does not name the key", err)
			}
			wantCause(t, err, kind)
			if got := c.proxy.Counts().ByOp["PutItem"]; got%2 != 0 || got < 2 || got > 2*3 {
				t.Errorf("PutItem was sent %d times, want the SDK's 2 attempts in each of ddblock's 1 to 3", got)
			}
			if _, err := c.GetLock(context.Background(), "k", ""); !errors.Is(err, ddblock.CodeLockNotFound) {
				t.Errorf("GetLock after a failed acquire: %v, want LOCK_NOT_FOUND", err)
			}
		})
	}
}

func TestAcquireHonoursContext(t *testing.T) {
	t.Run("deadline in a black hole", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		c := e.faulty(3)
		c.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.BlackHole, Op: "PutItem"})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := c.AcquireLock(ctx, "k")
		wantCode(t, err, ddblock.CodeAcquireTimeout)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v does not match context.DeadlineExceeded", err)
		}
	})
	t.Run("cancel in a black hole", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		c := e.faulty(3)
		f := c.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.BlackHole, Op: "PutItem"})
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			for f.Injected() == 0 {
				time.Sleep(time.Millisecond)
			}
			cancel()
		}()
		_, err := c.AcquireLock(ctx, "k")
		wantCode(t, err, ddblock.CodeCanceled)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %v does not match context.Canceled", err)
		}
	})
	t.Run("deadline during the SDK's backoff", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		// Ten attempts against constant throttling would back off for
		// tens of seconds; the caller's deadline must end it first.
		c := e.faulty(10)
		c.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.Throttling, Op: "PutItem"})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := c.AcquireLock(ctx, "k")
		wantCode(t, err, ddblock.CodeAcquireTimeout)
		if n := c.proxy.Counts().ByOp["PutItem"]; n >= 10 {
			t.Errorf("the SDK made all %d attempts: the deadline was not honoured", n)
		}
	})
}

// A write whose reply is lost is retried by the SDK, and the retry fails
// the write's own condition; ddblock must see that the item is its own.
func TestAcquireWhenReplyLost(t *testing.T) {
	e := newEnv(t)
	c := e.faulty(2)
	f := c.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.DropReply, Op: "PutItem", Count: 1})
	lock, err := c.AcquireLock(context.Background(), "k")
	if err != nil {
		t.Fatalf("AcquireLock after a lost reply: %v", err)
	}
	info, err := c.GetLock(context.Background(), "k", "")
	if err != nil || info.RecordVersionNumber != lock.RecordVersionNumber() || f.Injected() != 1 {
		t.Errorf("stored %+v, %v, injected %d; want our version %s and one lost reply", info, err, f.Injected(), lock.RecordVersionNumber())
	}
}

// When the SDK does not retry a put whose reply was lost, the attempt
// fails although the put landed. The acquire takes its item back (a
// conditional delete on its own version number), so that nobody waits a
// lease on a lock nobody holds, and tries again at its next retry.
func TestAcquireAfterLostPutReply(t *testing.T) {
	e := newEnv(t)
	c := e.faulty(1)
	f := c.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.DropReply, Op: "PutItem", Count: 1})
	lock, err := c.AcquireLock(context.Background(), "k", ddblock.WithRetryPeriod(20*time.Millisecond))
	if err != nil {
		t.Fatalf("AcquireLock after a lost reply: %v", err)
	}
	if f.Injected() != 1 {
		t.Fatalf("%d replies dropped; want 1", f.Injected())
	}
	info, err := c.GetLock(context.Background(), "k", "")
	if err != nil || info.RecordVersionNumber != lock.RecordVersionNumber() {
		t.Errorf("stored %+v, %v; want the lock's version %s", info, err, lock.RecordVersionNumber())
	}
}

// uncontended lets an acquire that nobody contends take as long as a
// starved machine makes it: with a lease of 300 ms, the default retry
// timeout (the lease and a heartbeat period) can pass while the first
// put is in flight.
var uncontended = ddblock.WithRetryTimeout(30 * time.Second)

// heartbeatTimes make heartbeats frequent and danger slow to come, so
// that a few failed heartbeats never put a lock in danger on a slow
// machine. The heartbeat timeout is pinned to the period (the default is
// half the safe period), so that a failed heartbeat costs one period.
func heartbeatTimes() []ddblock.Option {
	return append(times(100*time.Millisecond, 2*time.Second, 3*time.Second), ddblock.WithHeartbeatTimeout(100*time.Millisecond))
}

// waitHeartbeats waits until the client has sent n more heartbeats.
func waitHeartbeats(t *testing.T, c *ddblock.Client, n uint64) {
	t.Helper()
	want := c.Stats().HeartbeatsSent + n
	eventually(t, 10*time.Second, fmt.Sprintf("%d more heartbeats", n), func() bool { return c.Stats().HeartbeatsSent >= want })
}

func TestHeartbeatRetriesThroughFaults(t *testing.T) {
	for _, kind := range append(errorKinds, faultproxy.BlackHole) {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := e.faulty(3, heartbeatTimes()...)
			lock, err := c.AcquireLock(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			waitHeartbeats(t, c.Client, 1)
			// Counted from here: a heartbeat of a server still warming up
			// (DynamoDB Local's first calls) may outlast the 100 ms timeout.
			failedBefore := c.Stats().HeartbeatsFailed
			f := c.proxy.MustInject(faultproxy.Rule{Kind: kind, Op: "UpdateItem", Count: 3})
			eventually(t, 10*time.Second, "three faults", func() bool { return f.Injected() == 3 })
			waitHeartbeats(t, c.Client, 2)
			if err := lock.Err(); err != nil {
				t.Errorf("lock error after three failed heartbeats within the safe period: %v", err)
			}
			s := c.Stats()
			if s.InDanger != 0 || s.Stolen != 0 {
				t.Errorf("stats %+v: the lock went into danger or was thought stolen", s)
			}
			// How many heartbeats failed depends on whether the SDK's
			// backoff fit in the heartbeat timeout; at most one per fault.
			failed := s.HeartbeatsFailed - failedBefore
			if failed > 3 {
				t.Errorf("%d heartbeats failed for 3 faults", failed)
			}
			t.Logf("%s: %d of 3 faults ended a heartbeat (the rest were retried by the SDK in time)", kind, failed)
		})
	}
}

// When every heartbeat fails, the lock goes into danger after the safe
// period, with a clear error; once the fault clears, a heartbeat brings
// it back to LOCKED, and its Done channel stays closed.
func TestHeartbeatGivesUp(t *testing.T) {
	for _, kind := range []faultproxy.Kind{faultproxy.Throttling, faultproxy.ServerError, faultproxy.BlackHole} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			// A lease far past the safe period: the lock, in danger, can
			// still recover when the fault is gone, however late a loaded
			// machine gets there.
			c := e.faulty(3, times(100*time.Millisecond, time.Second, 10*time.Second)...)
			lock, err := c.AcquireLock(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			f := c.proxy.MustInject(faultproxy.Rule{Kind: kind, Op: "UpdateItem"})
			select {
			case <-lock.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the lock never went into danger")
			}
			wantCode(t, lock.Err(), ddblock.CodeLockInDanger)
			// On a starved machine the safe period may pass before the
			// first heartbeat under the fault has failed; fail it must.
			eventually(t, 10*time.Second, "a failed heartbeat", func() bool { return c.Stats().HeartbeatsFailed > 0 })
			if s := c.Stats(); s.InDanger != s.Recovered+1 {
				t.Errorf("stats %+v: want the lock in danger now, every earlier danger recovered", s)
			}
			f.Remove()
			eventually(t, 10*time.Second, "the lock to recover", func() bool { return lock.Status() == ddblock.StatusLocked })
			if s := c.Stats(); s.Recovered < 1 {
				t.Errorf("stats %+v: want a recovery", s)
			}
			wantCode(t, lock.Err(), ddblock.CodeLockInDanger)
		})
	}
}

// A heartbeat round in which one lock's heartbeats all fail still
// refreshes the client's other locks.
func TestFailingHeartbeatSparesOtherLocks(t *testing.T) {
	for _, kind := range []faultproxy.Kind{faultproxy.Throttling, faultproxy.BlackHole} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := e.faulty(3, times(100*time.Millisecond, time.Second, 1500*time.Millisecond)...)
			keys := []string{"alpha", "bravo", "charlie", "delta"}
			locks := map[string]*ddblock.Lock{}
			for _, k := range keys {
				l, err := c.AcquireLock(context.Background(), k)
				if err != nil {
					t.Fatal(err)
				}
				locks[k] = l
			}
			before := map[string]string{}
			for k, l := range locks {
				before[k] = l.RecordVersionNumber()
			}
			f := c.proxy.MustInject(faultproxy.Rule{Kind: kind, Op: "UpdateItem", BodyContains: `"alpha"`})
			select {
			case <-locks["alpha"].Done():
			case <-time.After(10 * time.Second):
				t.Fatal("alpha never went into danger")
			}
			wantCode(t, locks["alpha"].Err(), ddblock.CodeLockInDanger)
			if f.Injected() == 0 {
				t.Fatal("no fault was injected")
			}
			for _, k := range keys[1:] {
				l := locks[k]
				if err := l.Err(); err != nil {
					t.Errorf("%s: %v; only alpha's heartbeats failed", k, err)
				}
				if l.RecordVersionNumber() == before[k] {
					t.Errorf("%s was not heartbeated while alpha's heartbeats failed", k)
				}
			}
		})
	}
}

// A heartbeat whose write landed but whose reply was lost, and which the
// SDK did not retry within the heartbeat timeout, leaves the client with
// the old version number while the item carries the new one. The client
// remembers the version numbers of heartbeats whose outcome is unknown;
// the next heartbeat fails its condition, reads the item, recognises one
// of them, and carries on from it: the lock is kept, not declared stolen.
func TestHeartbeatReplyLostIsNotStolen(t *testing.T) {
	e := newEnv(t)
	c := e.faulty(1, heartbeatTimes()...)
	lock, err := c.AcquireLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	waitHeartbeats(t, c.Client, 1)
	f := c.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.DropReply, Op: "UpdateItem", Count: 1})
	eventually(t, 10*time.Second, "the lost reply", func() bool { return f.Injected() == 1 })
	// The next heartbeats meet the item the lost one wrote: three of
	// them landing (a lock judged stolen is heartbeated no more).
	waitHeartbeats(t, c.Client, 3)
	if err := lock.Err(); err != nil {
		t.Errorf("lock error after one lost heartbeat reply: %v (stats %+v)", err, c.Stats())
	}
}

func TestReleaseUnderFaults(t *testing.T) {
	t.Run("retried", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		c := e.faulty(2)
		lock, err := c.AcquireLock(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		f := c.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.Throttling, Op: "DeleteItem", Count: 1})
		if err := lock.Release(context.Background(), ddblock.WithBestEffort(false)); err != nil {
			t.Fatalf("Release with one throttle and two attempts: %v", err)
		}
		if _, err := c.GetLock(context.Background(), "k", ""); !errors.Is(err, ddblock.CodeLockNotFound) || f.Injected() != 1 {
			t.Errorf("GetLock after the release: %v (injected %d); want LOCK_NOT_FOUND after one throttle", err, f.Injected())
		}
	})
	t.Run("gives up", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		opts := times(50*time.Millisecond, 200*time.Millisecond, 300*time.Millisecond)
		c := e.faulty(2, opts...)
		lock, err := c.AcquireLock(context.Background(), "k", uncontended)
		if err != nil {
			t.Fatal(err)
		}
		c.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError, Op: "DeleteItem"})
		err = lock.Release(context.Background(), ddblock.WithBestEffort(false))
		wantCode(t, err, ddblock.CodeUnknown)
		wantCause(t, err, faultproxy.ServerError)
		// The holder stopped before the call; the item is still there,
		// readable, and another client takes it over after the lease.
		wantCode(t, lock.Err(), ddblock.CodeLockReleased)
		other := e.client(e.direct, opts...)
		info, err := other.GetLock(context.Background(), "k", "")
		if err != nil || info.RecordVersionNumber != lock.RecordVersionNumber() {
			t.Fatalf("GetLock: %+v, %v; want the unreleased item", info, err)
		}
		// The lease is 300 ms; on a starved machine the wait may outlast
		// the default timeout (the lease and a heartbeat period, 350 ms)
		// with a call in flight, but not half a minute.
		if _, err := other.AcquireLock(context.Background(), "k", ddblock.WithRetryPeriod(20*time.Millisecond),
			ddblock.WithRetryTimeout(30*time.Second)); err != nil {
			t.Errorf("taking over the unreleased lock: %v", err)
		}
	})
	t.Run("deadline in a black hole", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		c := e.faulty(3)
		lock, err := c.AcquireLock(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		c.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.BlackHole, Op: "DeleteItem"})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		err = lock.Release(ctx, ddblock.WithBestEffort(false))
		// Release reports a call its context ended as CANCELED wrapping
		// the context's error.
		wantCode(t, err, ddblock.CodeCanceled)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v does not match context.DeadlineExceeded", err)
		}
		// Best effort, the default, swallows it.
		lock2, err := c.AcquireLock(context.Background(), "k2")
		if err != nil {
			t.Fatal(err)
		}
		ctx2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel2()
		if err := lock2.Release(ctx2); err != nil {
			t.Errorf("best-effort Release: %v, want nil", err)
		}
	})
}

// A release whose delete landed but whose reply was lost is retried by
// the SDK; the retry fails the condition (the item is gone). Release reads
// the item on a condition failure: gone means given back (a theft followed
// by the thief's own release looks the same, and asks nothing of the
// releaser either), so it reports success, not LOCK_STOLEN.
func TestReleaseReplyLostIsNotStolen(t *testing.T) {
	e := newEnv(t)
	c := e.faulty(2)
	lock, err := c.AcquireLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	c.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.DropReply, Op: "DeleteItem", Count: 1})
	if err := lock.Release(context.Background(), ddblock.WithBestEffort(false)); err != nil {
		t.Errorf("Release whose delete landed: %v, want nil", err)
	}
	if _, err := c.GetLock(context.Background(), "k", ""); !errors.Is(err, ddblock.CodeLockNotFound) {
		t.Errorf("GetLock: %v, want LOCK_NOT_FOUND", err)
	}
}

// A fair waiter's coming into line whose reply is lost: retried by the
// SDK, the retry fails its condition (the ticket is in), and without the
// SDK's retry the next attempt finds the ticket in the line. Either way
// the waiter is in line once, takes the lock in its turn, and leaves no
// ticket behind.
func TestFairWaitWhenEnqueueReplyLost(t *testing.T) {
	for _, attempts := range []int{2, 1} {
		t.Run(fmt.Sprintf("attempts=%d", attempts), func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			c := e.faulty(attempts)
			f := c.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.DropReply, Op: "UpdateItem", BodyContains: "ddblock_line#", Count: 1})
			lock, err := c.AcquireLock(ctx, "k", ddblock.WithFairWaiting(), ddblock.WithRetryPeriod(20*time.Millisecond))
			if err != nil {
				t.Fatalf("fair AcquireLock after a lost reply to its coming into line: %v", err)
			}
			if f.Injected() != 1 {
				t.Fatalf("%d replies dropped; want 1", f.Injected())
			}
			line, err := hooks.Line(ctx, c.Client, "k", "")
			if err != nil || len(line.Tickets) != 0 {
				t.Errorf("line after the acquire: %+v, %v; want no ticket left", line, err)
			}
			if err := lock.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
