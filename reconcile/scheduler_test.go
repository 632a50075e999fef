package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// asPrometheus adapts a Collector for testutil, keeping Update's error.
type asPrometheus struct {
	c   *Collector
	err error
}

func (a *asPrometheus) Describe(ch chan<- *prometheus.Desc) { a.c.Describe(ch) }
func (a *asPrometheus) Collect(ch chan<- prometheus.Metric) {
	a.err = a.c.Update(context.Background(), ch)
}

func collector(t *testing.T, s *Scheduler) *asPrometheus {
	t.Helper()
	cs := s.Collectors()
	if len(cs) != 1 || cs[0].Name() != "reconcile" || cs[0].Target() != "search_index" {
		t.Fatalf("collectors: %v", cs)
	}
	return &asPrometheus{c: cs[0].(*Collector)}
}

const gapsAndRows = `
# HELP outbox_reconcile_gaps Gaps found by the last completed reconcile run, by kind: missing_outbox (committed row without outbox row), missing_target (published event not in the target), stale_target (target behind the authority), orphan_target (target row the authority lacks or is behind), duplicate_target (a key the target holds more than once).
# TYPE outbox_reconcile_gaps gauge
outbox_reconcile_gaps{kind="duplicate_target",reconcile="search_index"} 0
outbox_reconcile_gaps{kind="missing_outbox",reconcile="search_index"} 0
outbox_reconcile_gaps{kind="missing_target",reconcile="search_index"} 1
outbox_reconcile_gaps{kind="orphan_target",reconcile="search_index"} 0
outbox_reconcile_gaps{kind="stale_target",reconcile="search_index"} 1
# HELP outbox_reconcile_rows_checked Authority rows judged by the last completed reconcile run.
# TYPE outbox_reconcile_rows_checked gauge
outbox_reconcile_rows_checked{reconcile="search_index"} 12
`

// TestTargetUnreachable: a run that cannot read the target fails cleanly,
// keeps the last completed run's gaps and success time, reports its own
// duration, and fails the collector; the next run starts fresh.
func TestTargetUnreachable(t *testing.T) {
	p := newPair(t, "bigint")
	for i := 1; i <= 10; i++ {
		p.add(t, i, 1, old, "PUBLISHED", 1)
	}
	p.add(t, 11, 1, old, "PUBLISHED", 0)
	p.add(t, 12, 2, old, "PUBLISHED", 1)
	s := scheduler(t, p.yaml(""), nil)
	c := collector(t, s)
	if n := testutil.CollectAndCount(c); n != 1 || c.err != nil {
		t.Errorf("before any run: %d metrics, err %v; want running_seconds alone", n, c.err)
	}
	ctx := context.Background()
	ok, err := s.Run(ctx, "search_index", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(gapsAndRows), "outbox_reconcile_gaps", "outbox_reconcile_rows_checked"); err != nil {
		t.Error(err)
	}
	if c.err != nil {
		t.Errorf("collector after a completed run: %v", c.err)
	}

	// Close the target to new sessions and end the pool's.
	p.a.Exec(t, `ALTER DATABASE `+p.b.Name+` ALLOW_CONNECTIONS false`)
	p.a.Exec(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, p.b.Name)
	defer p.a.Exec(t, `ALTER DATABASE `+p.b.Name+` ALLOW_CONNECTIONS true`)
	failed, err := s.Run(ctx, "search_index", true)
	if err == nil || failed == nil || !failed.Failed() {
		t.Fatalf("run against a closed target: %+v, %v; want a failed run", failed, err)
	}
	if !strings.Contains(failed.Error, "target") {
		t.Errorf("error %q does not say the target failed", failed.Error)
	}
	if s.Last("search_index") != failed {
		t.Error("Last is not the failed run")
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(gapsAndRows), "outbox_reconcile_gaps", "outbox_reconcile_rows_checked"); err != nil {
		t.Errorf("after a failed run the last completed run's gaps stay: %v", err)
	}
	if c.err == nil {
		t.Error("collector after a failed run returned no error: collector_success would be 1")
	}
	wantTimes := fmt.Sprintf(`
# HELP outbox_reconcile_duration_seconds Length of the last reconcile run, completed or failed.
# TYPE outbox_reconcile_duration_seconds gauge
outbox_reconcile_duration_seconds{reconcile="search_index"} %g
# HELP outbox_reconcile_last_success_timestamp_seconds Unix time at which the last successful reconcile run ended.
# TYPE outbox_reconcile_last_success_timestamp_seconds gauge
outbox_reconcile_last_success_timestamp_seconds{reconcile="search_index"} %g
`, failed.Duration, float64(ok.Finished.UnixNano())/1e9)
	if err := testutil.CollectAndCompare(c, strings.NewReader(wantTimes), "outbox_reconcile_duration_seconds", "outbox_reconcile_last_success_timestamp_seconds"); err != nil {
		t.Error(err)
	}

	p.a.Exec(t, `ALTER DATABASE `+p.b.Name+` ALLOW_CONNECTIONS true`)
	again, err := s.Run(ctx, "search_index", true)
	if err != nil {
		t.Fatalf("run after the target came back: %v", err)
	}
	if again.TotalGaps() != 2 {
		t.Errorf("run after the target came back: %v", again.Gaps)
	}
	testutil.CollectAndCount(c)
	if c.err != nil {
		t.Errorf("collector after recovery: %v", c.err)
	}
}

func TestTargetNeverReachable(t *testing.T) {
	p := newPair(t, "bigint")
	p.add(t, 1, 1, old, "PUBLISHED", 1)
	s := scheduler(t, p.yaml("postgres://postgres@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=2"), nil)
	res, err := s.Run(context.Background(), "search_index", true)
	if err == nil || !res.Failed() || res.TotalGaps() != 0 {
		t.Fatalf("run with an unreachable target: %+v, %v", res, err)
	}
	c := collector(t, s)
	if n := testutil.CollectAndCount(c, "outbox_reconcile_gaps", "outbox_reconcile_last_success_timestamp_seconds"); n != 0 {
		t.Errorf("no run completed, yet %d gap or success metrics", n)
	}
	if n := testutil.CollectAndCount(c, "outbox_reconcile_duration_seconds"); n != 1 || c.err == nil {
		t.Errorf("failed run: %d duration metrics, collector err %v", n, c.err)
	}
}

// TestSchedulerNeverOverlaps schedules a job every second whose run takes
// longer: due runs are skipped and logged, never run beside the one in
// progress.
func TestSchedulerNeverOverlaps(t *testing.T) {
	p := newPair(t, "bigint")
	for i := 1; i <= 40; i++ {
		p.add(t, i, 1, recent, "PUBLISHED", 1)
	}
	logs := &logBuffer{}
	s := scheduler(t, strings.Replace(p.yaml(""), `schedule: "@every 1h"`, `schedule: "@every 1s"`, 1), logs)
	js := s.jobs["search_index"]
	var mu sync.Mutex
	active, maxActive, runs := 0, 0, 0
	js.hooks.onRun = func(start bool) {
		mu.Lock()
		defer mu.Unlock()
		if start {
			active++
			runs++
			maxActive = max(maxActive, active)
		} else {
			active--
		}
	}
	js.hooks.afterChunk = func(int) { time.Sleep(600 * time.Millisecond) }
	s.Start()
	deadline := time.Now().Add(15 * time.Second)
	busyChecked := false
	for time.Now().Before(deadline) {
		mu.Lock()
		a := active
		mu.Unlock()
		if a == 1 && !busyChecked {
			if _, err := s.Run(context.Background(), "search_index", false); !errors.Is(err, ErrBusy) {
				t.Errorf("Run during a scheduled run: %v, want ErrBusy", err)
			}
			busyChecked = true
		}
		if s.Last("search_index") != nil && strings.Contains(logs.String(), "skipped") && busyChecked {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.Stop()
	mu.Lock()
	defer mu.Unlock()
	if maxActive != 1 || runs == 0 {
		t.Errorf("%d runs, at most %d at once; want at most 1", runs, maxActive)
	}
	if !strings.Contains(logs.String(), "reconcile run skipped") {
		t.Errorf("no skipped run logged:\n%s", logs)
	}
	if last := s.Last("search_index"); last == nil || last.Full {
		t.Errorf("last run %+v, want a completed windowed run", last)
	}
	if active != 0 {
		t.Errorf("%d runs still active after Stop", active)
	}
}

func TestHandlerAndPrint(t *testing.T) {
	p := newPair(t, "bigint")
	p.add(t, 1, 1, old, "PUBLISHED", 1)
	p.add(t, 2, 1, old, "PUBLISHED", 0)
	p.add(t, 3, 1, old, "", 1)
	s := scheduler(t, p.yaml(""), nil)
	h := s.Handler()
	get := func(q string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/reconcile"+q, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get("?job=nope"); code != http.StatusBadRequest || !strings.Contains(body, `unknown reconcile job \"nope\"`) || !strings.Contains(body, "search_index") {
		t.Errorf("unknown job: %d %s", code, body)
	}
	if code, body := get("?job=search_index"); code != http.StatusNotFound {
		t.Errorf("before a run: %d %s", code, body)
	}
	res, err := s.Run(context.Background(), "search_index", true)
	if err != nil {
		t.Fatal(err)
	}
	code, body := get("?job=search_index")
	if code != http.StatusOK {
		t.Fatalf("after a run: %d %s", code, body)
	}
	var got Result
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Findings) != 2 || got.Gaps[MissingTarget] != 1 || got.Gaps[MissingOutbox] != 1 {
		t.Errorf("API answer: %s", body)
	}
	for _, secret := range []string{"secret", "body", "payload"} {
		if strings.Contains(body, secret) {
			t.Errorf("API answer mentions %q: %s", secret, body)
		}
	}
	if c, _ := get(""); c != http.StatusOK {
		t.Errorf("job left out with one job configured: %d", c)
	}

	var text bytes.Buffer
	if err := Print(&text, res, "text"); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"full sweep", "missing_outbox", "missing_target    1", "KIND", "published"} {
		if !strings.Contains(text.String(), w) {
			t.Errorf("text output lacks %q:\n%s", w, text.String())
		}
	}
	var js bytes.Buffer
	if err := Print(&js, res, "json"); err != nil {
		t.Fatal(err)
	}
	if !json.Valid(js.Bytes()) {
		t.Errorf("json output: %s", js.String())
	}
	if err := Print(&js, res, "yaml"); err == nil {
		t.Error("unknown format accepted")
	}
	if ExitCode(nil, res) != ExitGaps {
		t.Errorf("exit code %d, want %d", ExitCode(nil, res), ExitGaps)
	}
}
