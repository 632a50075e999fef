package testutil

import (
	"testing"
	"time"
)

// HangLimit is how long Bounded waits before it calls a call hung: far
// past any deadline the tests give (a few seconds), so that only a call
// that waits on its blocker, not a slow machine, reaches it.
const HangLimit = time.Minute

// Bounded runs call, which has a deadline of its own, while the test
// keeps what would block it (a lock, a hung broker, a stalled collector)
// in place, and fails if call has not returned after HangLimit: a call
// that honours its deadline returns however busy the machine is, one that
// waits on the blocker never does. How long it took is returned for the
// test's log, not judged (speed belongs in the benchmarks).
func Bounded(t testing.TB, what string, deadline time.Duration, call func()) time.Duration {
	t.Helper()
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		call()
	}()
	select {
	case <-done:
		return time.Since(start)
	case <-time.After(HangLimit):
		t.Fatalf("%s did not return %v after its %v deadline while blocked: it waits on what blocks it", what, HangLimit, deadline)
		return 0
	}
}
