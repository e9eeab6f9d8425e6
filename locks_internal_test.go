package ddblock

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Reports recorded by many goroutines run one at a time, in the order
// they were recorded under the lock's mutex, and none is left behind.
func TestReportsInOrderOneAtATime(t *testing.T) {
	l := &Lock{}
	var (
		running atomic.Int32
		overlap atomic.Bool
		mu      sync.Mutex
		ran     []int
		next    int
	)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				l.mu.Lock()
				seq := next
				next++
				l.reportLocked(func() {
					if running.Add(1) > 1 {
						overlap.Store(true)
					}
					mu.Lock()
					ran = append(ran, seq)
					mu.Unlock()
					running.Add(-1)
				})
				l.unlock()
			}
		})
	}
	wg.Wait()
	if overlap.Load() {
		t.Error("two reports of one lock ran at once")
	}
	// Reports that pile up past the bound behind a busy reporter are
	// dropped, oldest first: the newest always runs.
	if len(ran) == 0 || ran[len(ran)-1] != 8*200-1 || !slices.IsSorted(ran) {
		t.Errorf("%d reports ran, sorted %v, last %v; want them in the order recorded, the newest last", len(ran), slices.IsSorted(ran), ran[len(ran)-1:])
	}
	if l.reporting || len(l.reports) != 0 {
		t.Errorf("left reporting %v with %d reports", l.reporting, len(l.reports))
	}
}

// A goroutine that finds the lock's reports being run by another returns
// at once; the one running them runs its report too, after its own.
func TestUnlockDoesNotWaitForAnotherReporter(t *testing.T) {
	l := &Lock{}
	gate, entered := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	first := make(chan struct{})
	go func() {
		defer close(first)
		l.mu.Lock()
		l.reportLocked(func() { close(entered); <-gate; note("first") })
		l.unlock()
	}()
	<-entered
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		l.mu.Lock()
		l.reportLocked(func() { note("second") })
		l.unlock()
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("unlock waited for the report another goroutine is running")
	}
	close(gate)
	<-first // the first reporter runs the second report before it returns
	if want := []string{"first", "second"}; !slices.Equal(order, want) {
		t.Errorf("reports ran %v; want %v", order, want)
	}
}

// A pass over several locks changes them all before it reports: the
// batch keeps the claims, and deliver runs each lock's reports.
func TestReportBatch(t *testing.T) {
	locks := []*Lock{{}, {}, {}}
	var ran []int
	var batch reportBatch
	for i, l := range locks {
		l.mu.Lock()
		l.reportLocked(func() { ran = append(ran, i) })
		batch.unlock(l)
	}
	if len(ran) != 0 {
		t.Fatalf("reports ran before deliver: %v", ran)
	}
	// Meanwhile another goroutine's unlock leaves the reports to the batch.
	locks[1].mu.Lock()
	locks[1].reportLocked(func() { ran = append(ran, 10) })
	locks[1].unlock()
	if len(ran) != 0 {
		t.Fatalf("an unlock ran reports claimed by the batch: %v", ran)
	}
	batch.deliver()
	if want := []int{0, 1, 10, 2}; !slices.Equal(ran, want) {
		t.Errorf("reports ran %v; want %v", ran, want)
	}
}

// While the reporter is stuck, a lock's outbox keeps the newest reports.
func TestReportsBounded(t *testing.T) {
	l := &Lock{}
	l.mu.Lock()
	l.reporting = true // someone is running the lock's reports, stuck
	var ran []int
	for i := range maxPendingReports + 5 {
		l.reportLocked(func() { ran = append(ran, i) })
	}
	l.reporting = false // it returns, and the next unlock runs what is kept
	l.unlock()
	want := make([]int, 0, maxPendingReports)
	for i := 5; i < maxPendingReports+5; i++ {
		want = append(want, i)
	}
	if !slices.Equal(ran, want) {
		t.Errorf("reports kept %v; want the newest %d, %v", ran, maxPendingReports, want)
	}
}

// A report that panics gives up the claim: the next unlock runs the
// reports left.
func TestReportPanicGivesUpClaim(t *testing.T) {
	l := &Lock{}
	ran := false
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the report's panic was lost")
			}
		}()
		l.mu.Lock()
		l.reportLocked(func() { panic("handler") })
		l.reportLocked(func() { ran = true })
		l.unlock()
	}()
	if ran {
		t.Fatal("the report after the panicking one ran in the panic")
	}
	l.mu.Lock()
	l.unlock()
	if !ran {
		t.Error("the report left by the panic never ran")
	}
}
