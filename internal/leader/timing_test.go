package leader

import (
	"strings"
	"testing"
	"time"
)

func TestKeyStableAndDistinct(t *testing.T) {
	// The key is what replicas of different versions agree on: it must
	// not change (a rolling upgrade would run two leaders).
	if got := Key("reconcile/orders"); got != Key("reconcile/orders") || got == 0 {
		t.Fatalf("Key not deterministic: %d", got)
	}
	// FNV-1a 64 of "outbox_exporter/leader/v1\x00reconcile/orders", computed
	// apart from Go (Python, by the algorithm's definition).
	const pinned = int64(0x772eb585c49e740c)
	if got := Key("reconcile/orders"); got != pinned {
		t.Errorf("Key(%q) = %#x, was %#x: the key of a task must never change", "reconcile/orders", got, pinned)
	}
	seen := map[int64]string{}
	for _, kind := range []string{"reconcile", "audit", "cdc"} {
		for _, name := range []string{"a", "b", "orders", "messages", "m1", "m2"} {
			task := Task(kind, name)
			if other, dup := seen[Key(task)]; dup {
				t.Fatalf("%s and %s share a key", task, other)
			}
			seen[Key(task)] = task
		}
	}
}

func TestTimingOrdersTheBounds(t *testing.T) {
	for _, check := range []time.Duration{time.Second, 2 * time.Second, 7 * time.Second, 30 * time.Second} {
		tm := Timing{Check: check, Retry: 5 * time.Second}
		ka := tm.Keepalive()
		// A partitioned leader must stop before the server frees its lock.
		if ka.Total() <= tm.StopBound() {
			t.Errorf("check %v: the server drops a silent session after %v, before the leader stops (%v)", check, ka.Total(), tm.StopBound())
		}
		// A replica that won a lock freed by a terminated session waits
		// until the old leader's next check has failed.
		if tm.Takeover() < tm.StopBound() {
			t.Errorf("check %v: takeover %v shorter than the stop bound %v", check, tm.Takeover(), tm.StopBound())
		}
		if ka.Idle%time.Second != 0 || ka.Interval%time.Second != 0 {
			t.Errorf("check %v: keepalives %v/%v are not whole seconds (the server takes seconds)", check, ka.Idle, ka.Interval)
		}
		b := tm.Bounds()
		if b.Exit != tm.Retry+tm.Check+tm.Takeover() || b.Partition != ka.Total()+b.Exit {
			t.Errorf("check %v: bounds %+v", check, b)
		}
		// A standby that waits for the lock needs no Retry.
		tm.Wait = StandbyWait
		if b := tm.Bounds(); b.Exit != 2*tm.Check+tm.Takeover() || b.Partition != ka.Total()+b.Exit {
			t.Errorf("check %v, wait %v: bounds %+v", check, tm.Wait, b)
		}
	}
	tm := Timing{Check: 2 * time.Second, Retry: 5 * time.Second}
	if tm.wait(true) != tm.Check || tm.wait(false) != tm.Retry {
		t.Errorf("wait: holding %v, standing by %v", tm.wait(true), tm.wait(false))
	}
}

func TestDue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	acquired := map[string]time.Time{"a": t0, "b": t0.Add(3 * time.Second), "c": t0.Add(-time.Minute)}
	terms := map[string]*term{"c": {}}
	for _, tc := range []struct {
		at   time.Duration
		want string
	}{
		{0, ""},
		{4*time.Second - time.Nanosecond, ""},
		{4 * time.Second, "a"},
		{7 * time.Second, "a,b"},
	} {
		got := strings.Join(due(acquired, terms, t0.Add(tc.at), 4*time.Second), ",")
		if got != tc.want {
			t.Errorf("at +%v: due %q, want %q", tc.at, got, tc.want)
		}
	}
}

func TestIdentityRoundTrip(t *testing.T) {
	if got := Identity(AppName("pod-0:9187")); got != "pod-0:9187" {
		t.Errorf("round trip: %q", got)
	}
	long := strings.Repeat("x", 80)
	if n := AppName(long); len(n) != 63 || Identity(n) != long[:63-len(identityPrefix)] {
		t.Errorf("long identity: %q", n)
	}
	for _, app := range []string{"", "psql", "outbox_exporter", identityPrefix} {
		if got := Identity(app); got != "unknown" {
			t.Errorf("Identity(%q) = %q, want unknown", app, got)
		}
	}
}
