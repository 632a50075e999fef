package demo

import (
	"strings"
	"testing"
	"time"
)

func TestDecideFailure(t *testing.T) {
	cases := []struct {
		name      string
		attempts  int
		unknown   bool
		want      failure
		errPrefix string
	}{
		{"first failure retries after 1s", 1, false, failure{Status: StatusPending, RetryIn: time.Second}, "broker down"},
		{"third failure retries after 4s", 3, false, failure{Status: StatusPending, RetryIn: 4 * time.Second}, "broker down"},
		{"unknown result waits the long backoff", 1, true, failure{Status: StatusPending, RetryIn: 45 * time.Second}, unknownResultPrefix + "broker down"},
		{"last attempt abandons", 5, false, failure{Status: StatusAbandoned}, "gave up after 5 attempts: broker down"},
		{"past max abandons, unknown kept in the error", 7, true, failure{Status: StatusAbandoned}, "gave up after 7 attempts: " + unknownResultPrefix},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := decideFailure(c.attempts, 5, c.unknown, 45*time.Second, "broker\n  down")
			if got.Status != c.want.Status || got.RetryIn != c.want.RetryIn {
				t.Errorf("got %s in %s, want %s in %s", got.Status, got.RetryIn, c.want.Status, c.want.RetryIn)
			}
			if !strings.HasPrefix(got.LastError, c.errPrefix) {
				t.Errorf("last_error %q, want prefix %q", got.LastError, c.errPrefix)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	want := map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 5: 16 * time.Second, 6: 30 * time.Second, 60: 30 * time.Second}
	for attempts, w := range want {
		if got := backoff(attempts); got != w {
			t.Errorf("backoff(%d) = %s, want %s", attempts, got, w)
		}
	}
}

func TestTrimError(t *testing.T) {
	long := strings.Repeat("x", 500)
	if got := trimError(long); len(got) > 210 || !strings.HasSuffix(got, "…") {
		t.Errorf("trimError kept %d bytes: %q", len(got), got[len(got)-5:])
	}
	if got := trimError("a\n b\t c"); got != "a b c" {
		t.Errorf("trimError = %q", got)
	}
}

func TestEventRoundTrip(t *testing.T) {
	e := event{EventID: "5f0c3c1e-0000-4000-8000-000000000001", Type: "message.edited", MessageID: 42, Version: 2}
	got, err := decodeEvent(e.encode())
	if err != nil || got != e {
		t.Fatalf("decode(encode(e)) = %+v, %v; want %+v", got, err, e)
	}
	for _, bad := range []string{`not json`, `{"message_id": 0, "version": 1}`, `{"message_id": 3, "version": 0}`} {
		if _, err := decodeEvent([]byte(bad)); err == nil {
			t.Errorf("decodeEvent(%q) accepted it", bad)
		}
	}
}

func TestEventType(t *testing.T) {
	if eventType(1) != "message.created" || eventType(2) != "message.edited" || eventType(7) != "message.edited" {
		t.Error("eventType: v1 is created, later versions edited")
	}
}

func TestNewEventID(t *testing.T) {
	a, b := newEventID(), newEventID()
	if a == b || len(a) != 36 || a[14] != '4' || strings.Count(a, "-") != 4 {
		t.Errorf("newEventID gave %q and %q", a, b)
	}
}

func TestNextFaultCycles(t *testing.T) {
	seen := map[FaultKind]int{}
	for n := 0; n < 2*len(FaultKinds); n++ {
		seen[nextFault(n)]++
	}
	for _, k := range FaultKinds {
		if seen[k] != 2 {
			t.Errorf("fault %s injected %d times in two rounds, want 2", k, seen[k])
		}
		if len(k.Metrics()) == 0 {
			t.Errorf("fault %s names no metric to look at", k)
		}
	}
	if nextFault(0) != FaultRelayCrash {
		t.Errorf("first fault %s, want %s", nextFault(0), FaultRelayCrash)
	}
}

func TestRecentIDs(t *testing.T) {
	r := newRecentIDs(3)
	if _, ok := r.pick(0); ok {
		t.Fatal("pick from an empty set")
	}
	for id := int64(1); id <= 5; id++ {
		r.add(id)
	}
	// Holds the last three: 3, 4, 5 in some order.
	got := map[int64]bool{}
	for i := 0; i < 3; i++ {
		id, ok := r.pick(i)
		if !ok {
			t.Fatal("pick failed")
		}
		got[id] = true
	}
	if len(got) != 3 || !got[3] || !got[4] || !got[5] {
		t.Errorf("recent ids %v, want 3, 4, 5", got)
	}
	r.freeze(4)
	for i := 0; i < 6; i++ {
		if id, _ := r.pick(i); id == 4 {
			t.Errorf("pick(%d) returned frozen id 4", i)
		}
	}
	r.freeze(3)
	r.freeze(5)
	if id, ok := r.pick(0); ok {
		t.Errorf("all frozen, yet pick returned %d", id)
	}
}

func TestWithDatabase(t *testing.T) {
	cases := []struct{ in, want string }{
		{"postgres://u:p@127.0.0.1:5432/postgres?sslmode=disable", "postgres://u:p@127.0.0.1:5432/outbox_demo?sslmode=disable"},
		{"postgresql://u@h/", "postgresql://u@h/outbox_demo"},
		{"host=127.0.0.1 dbname=postgres", "host=127.0.0.1 dbname=postgres dbname='outbox_demo'"},
	}
	for _, c := range cases {
		got, err := withDatabase(c.in, "outbox_demo")
		if err != nil || got != c.want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestDescribeSaysWhatToLookFor(t *testing.T) {
	o := Options{}
	o.setDefaults()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, k := range FaultKinds {
		r := FaultRecord{Kind: k, At: at, EventIDs: []string{"ev-1"}, MessageIDs: []int64{17}, Group: GroupNotify, Until: at.Add(o.StallFor)}
		s := describe(r, o)
		if !strings.HasPrefix(s, "[03:04:05] FAULT "+string(k)+": ") {
			t.Errorf("%s: announcement starts %q", k, s[:min(len(s), 40)])
		}
		if !strings.Contains(s, "Look for: "+k.Metrics()[0]) {
			t.Errorf("%s: announcement does not name %s: %q", k, k.Metrics()[0], s)
		}
		if !strings.Contains(s, "ev-1") && !strings.Contains(s, "17") && !strings.Contains(s, GroupNotify) {
			t.Errorf("%s: announcement names no id: %q", k, s)
		}
	}
}
