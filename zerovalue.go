package ddblock

import "context"

// Guards for values not made by this package's constructors. A nil or
// zero Client, Lock, Election, Leadership or Semaphore answers every
// call with an error of CodeInvalidArgument, or with a zero result where
// the method returns no error: never a panic.

// usable refuses a nil Client, or a Client not made with New.
func (c *Client) usable() error {
	if c == nil || c.ddb == nil || c.ctx == nil {
		return invalidArg("Client", "was not made with New")
	}
	return nil
}

// usable refuses a nil Lock, or a Lock not handed out by a Client.
func (l *Lock) usable() error {
	if l == nil || l.client == nil || l.done == nil {
		return invalidArg("Lock", "was not acquired through a Client")
	}
	return nil
}

// closedChan is the Done channel of a Lock that is no lock.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// cancelledContext returns a context that is already cancelled with
// cause err.
func cancelledContext(err error) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(err)
	return ctx
}

// usable refuses a nil Semaphore, or one not made by NewSemaphore.
func (s *Semaphore) usable() error {
	if s == nil || s.c == nil {
		return invalidArg("Semaphore", "was not made by Client.NewSemaphore")
	}
	return s.c.usable()
}
