package reconcile

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestGateLeavesRunsToTheLeader: while the gate says another replica
// leads the job, no scheduled run starts; once this replica leads, runs
// start, and losing the lease cancels the run in progress.
func TestGateLeavesRunsToTheLeader(t *testing.T) {
	p := newPair(t, "bigint")
	for i := 1; i <= 40; i++ {
		p.add(t, i, 1, recent, "PUBLISHED", 1)
	}
	s := scheduler(t, strings.Replace(p.yaml(""), `schedule: "@every 1h"`, `schedule: "@every 1s"`, 1), &logBuffer{})
	js := s.jobs["search_index"]
	var mu sync.Mutex
	asked, runs := 0, 0
	var lease context.Context
	var lose context.CancelFunc
	s.SetGate(func(job string) (context.Context, bool) {
		mu.Lock()
		defer mu.Unlock()
		if job != "search_index" {
			t.Errorf("gate asked for %q", job)
		}
		asked++
		return lease, lease != nil
	})
	js.hooks.onRun = func(start bool) {
		if start {
			mu.Lock()
			runs++
			mu.Unlock()
		}
	}
	// Chunks of five rows: the run has chunks left when the lease is
	// lost after its first.
	js.initRows, js.minRows, js.maxRows = 5, 5, 5
	lost := make(chan struct{})
	var once sync.Once
	js.hooks.afterChunk = func(int) {
		mu.Lock()
		l := lose
		mu.Unlock()
		once.Do(func() { l(); close(lost) })
	}
	s.Start()
	t.Cleanup(s.Stop)
	waitFor(t, "the gate asked three times", func() bool { mu.Lock(); defer mu.Unlock(); return asked >= 3 })
	mu.Lock()
	if runs != 0 {
		t.Fatalf("%d runs while another replica leads", runs)
	}
	lease, lose = context.WithCancel(context.Background())
	t.Cleanup(lose)
	mu.Unlock()
	<-lost
	waitFor(t, "the run ended", func() bool { return s.Last("search_index") != nil })
	if last := s.Last("search_index"); !strings.Contains(last.Error, "canceled") {
		t.Fatalf("run after the lease was lost: %+v, want canceled", last)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
