package leader

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

func statusOf(e *Elector, task string) Status {
	for _, s := range e.Status() {
		if s.Task == task {
			return s
		}
	}
	return Status{}
}

// TestSetTasksAndWork: what a reload does to a running Elector. New work
// for a led task replaces the old in the same term; a task dropped ends
// its term and frees its lock for the other replica; a task added is
// taken; the tasks that stay are never handed over.
func TestSetTasksAndWork(t *testing.T) {
	db := pgtest.New(t)
	dbc := roleDB(t, db)
	const a, b, c = "reconcile/a", "audit/b", "reconcile/c"
	var l ledger
	r1 := New([]string{a, b}, PGDialer(dbc, "r1:9187", fast, nil), fast, testutil.Quiet())
	l.watch(r1, "r1")
	start(t, r1)
	waitUntil(t, "r1 leads both", func() bool { return statusOf(r1, a).Leading && statusOf(r1, b).Leading })
	r2 := New([]string{a, b}, PGDialer(dbc, "r2:9187", fast, nil), fast, testutil.Quiet())
	l.watch(r2, "r2")
	start(t, r2)
	waitUntil(t, "r2 names r1", func() bool { return statusOf(r2, a).Leader == "r1:9187" && statusOf(r2, b).Leader == "r1:9187" })
	since := statusOf(r1, a).Since
	termCtx, _ := r1.Lease(a)

	// New work for a: the ledger's work of the term ends, the new work
	// runs in the same term.
	var running atomic.Bool
	stopped := make(chan struct{})
	r1.SetWork(a, func(ctx context.Context) {
		running.Store(true)
		<-ctx.Done()
		running.Store(false)
		close(stopped)
	})
	waitUntil(t, "the new work of "+a+" runs", running.Load)
	l.mu.Lock()
	for _, r := range l.terms {
		if r.task == a && r.end.IsZero() {
			t.Errorf("the replaced work of %s still runs", a)
		}
	}
	l.mu.Unlock()
	if ctx, ok := r1.Lease(a); !ok || ctx != termCtx || statusOf(r1, a).Since != since {
		t.Fatalf("%s was handed over by SetWork", a)
	}

	// b dropped, c added on r1.
	r1.SetTasks([]string{a, c})
	l.mu.Lock()
	for _, r := range l.terms {
		if r.task == b && r.replica == "r1" && r.end.IsZero() {
			t.Errorf("SetTasks returned while r1's work of %s ran", b)
		}
	}
	l.mu.Unlock()
	if got := r1.Tasks(); !slices.Equal(got, []string{a, c}) {
		t.Fatalf("r1 stands for %v", got)
	}
	waitUntil(t, "r2 takes the freed "+b, func() bool { return statusOf(r2, b).Leading })
	waitUntil(t, "r1 leads the added "+c, func() bool { return statusOf(r1, c).Leading })
	if ctx, ok := r1.Lease(a); !ok || ctx != termCtx || statusOf(r1, a).Since != since || statusOf(r2, a).Leading {
		t.Fatalf("%s was handed over by SetTasks", a)
	}
	select {
	case <-stopped:
		t.Fatalf("the work of %s stopped though its term goes on", a)
	default:
	}
	if o := l.overlaps(); o != "" {
		t.Fatalf("two leaders at once: %s", o)
	}
}
