package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// reloadYAML is the pair's config with two more jobs over the same
// tables: "second" with the given window, and extra.
func reloadYAML(p *pair, window, extra string) string {
	job := func(name, window string) string {
		return fmt.Sprintf(`  %s:
    schedule: "@every 1h"
    window: %s
    grace: 2m
    authority: {database: main, table: public.messages, key: id, version: version, created_at: created_at}
    target: {database: search, table: public.search_index, key: message_id, version: version}
`, name, window)
	}
	return p.yaml("") + job("second", window) + job(extra, "24h")
}

// exposition is what job's collector exports, as text.
func exposition(t *testing.T, s *Scheduler, job string) string {
	t.Helper()
	b, err := testutil.CollectAndFormat(&asPrometheus{c: &Collector{s: s, job: job}}, expfmt.TypeTextPlain,
		"outbox_reconcile_gaps", "outbox_reconcile_rows_checked", "outbox_reconcile_last_success_timestamp_seconds",
		"outbox_reconcile_duration_seconds", "outbox_reconcile_running_seconds")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// nexts are the next times of js's schedules in the cron.
func nexts(s *Scheduler, js *jobState) []time.Time {
	var out []time.Time
	for _, id := range js.entries {
		out = append(out, s.cron.Entry(id).Next)
	}
	return out
}

// reloadRuns is TestReloadPerJob's state just before the reload: what
// search_index showed, and a run of each of search_index (a) and second
// (b) in progress, held at their start.
type reloadRuns struct {
	p        *pair
	s        *Scheduler
	logs     *logBuffer
	a, b     *jobState
	lastA    *Result
	seriesA  string
	nextA    []time.Time
	releaseA chan struct{}
	doneA    chan error
	doneB    chan error
}

// TestReloadPerJob: a reload that changes job "second", removes "third"
// and adds "fourth" keeps "search_index" whole: its last results, last
// success and series unchanged, its run in progress going on (the choice:
// an unchanged job's run continues in the kept state, and completes into
// it), its places in the schedule. The changed job starts afresh, its run
// in progress cancelled and logged; the removed job's series end.
func TestReloadPerJob(t *testing.T) {
	r := reloadRunsBefore(t)
	reloadApply(t, r)
	checkReloadChangedAndRemoved(t, r)
	checkReloadKept(t, r)
}

// reloadRunsBefore runs the three jobs once, records what search_index
// shows, and leaves a run of search_index and of second held in progress.
func reloadRunsBefore(t *testing.T) *reloadRuns {
	p := newPair(t, "bigint")
	for i := 1; i <= 10; i++ {
		p.add(t, i, 1, old, "PUBLISHED", 1)
	}
	p.add(t, 11, 1, old, "PUBLISHED", 0)
	logs := &logBuffer{}
	s := scheduler(t, reloadYAML(p, "24h", "third"), logs)
	s.Start()
	ctx := context.Background()
	for _, j := range []string{"search_index", "second", "third"} {
		if _, err := s.Run(ctx, j, true); err != nil {
			t.Fatalf("run %s: %v", j, err)
		}
	}
	r := &reloadRuns{p: p, s: s, logs: logs, a: s.jobs["search_index"], b: s.jobs["second"]}
	r.lastA = s.Last("search_index")
	r.seriesA = exposition(t, s, "search_index")
	if !strings.Contains(r.seriesA, `outbox_reconcile_gaps{kind="missing_target",reconcile="search_index"} 1`) {
		t.Fatalf("search_index before the reload:\n%s", r.seriesA)
	}
	r.nextA = nexts(s, r.a)
	if len(r.nextA) != 1 || r.nextA[0].IsZero() {
		t.Fatalf("search_index's schedule: %v", r.nextA)
	}

	// A run of each of search_index and second in progress, held at
	// their start until released (or cancelled).
	startedA, releaseA, doneA := holdRun(r.a)
	startedB, _, doneB := holdRun(r.b)
	r.releaseA, r.doneA, r.doneB = releaseA, doneA, doneB
	go func() { _, err := s.Run(ctx, "search_index", true); doneA <- err }()
	go func() { _, err := s.Run(ctx, "second", true); doneB <- err }()
	for _, c := range []chan struct{}{startedA, startedB} {
		select {
		case <-c:
		case <-time.After(30 * time.Second):
			t.Fatal("a held run did not start")
		}
	}
	return r
}

// holdRun makes js's next run stop at its start until release is closed
// (or the run is cancelled); started is closed when it gets there.
func holdRun(js *jobState) (started, release chan struct{}, done chan error) {
	started, release, done = make(chan struct{}), make(chan struct{}), make(chan error, 1)
	js.hooks.stall = func(ctx context.Context) {
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	return started, release, done
}

// reloadApply prepares the reload (second's window changed, third
// removed, fourth added), checks that Prepare alone changes nothing, and
// applies it.
func reloadApply(t *testing.T, r *reloadRuns) {
	cfg, err := config.Parse([]byte(reloadYAML(r.p, "12h", "fourth")), nil)
	if err != nil {
		t.Fatal(err)
	}
	pools := map[string]*pgxpool.Pool{"main": r.a.plan.authority, "search": r.a.plan.target}
	rl, err := r.s.Prepare(cfg, pools)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rl.Kept, rl.Fresh, rl.Removed) != "[search_index] [fourth second] [third]" {
		t.Errorf("kept, fresh, removed = %v %v %v", rl.Kept, rl.Fresh, rl.Removed)
	}
	if r.s.job("third") == nil || r.s.jobs["second"] != r.b {
		t.Fatal("Prepare changed the scheduler before Apply")
	}
	rl.Apply()
}

// checkReloadChangedAndRemoved: the changed job's run was cancelled
// (Apply waited for it) and logged, and its new state has no result yet;
// the removed job is gone; the fresh jobs are scheduled.
func checkReloadChangedAndRemoved(t *testing.T, r *reloadRuns) {
	s := r.s
	select {
	case err := <-r.doneB:
		if err == nil || !errors.Is(err, context.Canceled) {
			t.Errorf("second's run across the reload: %v, want cancelled", err)
		}
	default:
		t.Error("Apply returned before the changed job's run ended")
	}
	if !strings.Contains(r.logs.String(), "reconcile run cancelled: a config reload changed its job") {
		t.Errorf("the cancelled run was not logged:\n%s", r.logs)
	}
	if s.jobs["second"] == r.b || s.Last("second") != nil || s.jobs["second"].plan.job.Window != 12*time.Hour {
		t.Error("the changed job kept its old state")
	}
	// The removed job: no series, no runs.
	if got := exposition(t, s, "third"); got != "" {
		t.Errorf("the removed job still exports:\n%s", got)
	}
	if _, err := s.Run(context.Background(), "third", true); !errors.Is(err, ErrUnknownJob) {
		t.Errorf("run of the removed job: %v", err)
	}
	if got := strings.Join(s.Jobs(), ","); got != "fourth,search_index,second" {
		t.Errorf("jobs after the reload: %s", got)
	}
	var cs []string
	for _, c := range s.Collectors() {
		cs = append(cs, c.Target())
	}
	if got := strings.Join(cs, ","); got != "fourth,search_index,second" {
		t.Errorf("collectors after the reload: %s", got)
	}
	if len(s.jobs["fourth"].entries) != 1 || len(s.jobs["second"].entries) != 1 {
		t.Error("the fresh jobs are not scheduled")
	}
}

// checkReloadKept: the kept job has the same state, is still running,
// has the same series and the same places in the schedule; then its run
// completes into the kept state.
func checkReloadKept(t *testing.T, r *reloadRuns) {
	s := r.s
	if s.jobs["search_index"] != r.a || s.Last("search_index") != r.lastA {
		t.Fatal("the unchanged job's state was replaced")
	}
	if s.running("search_index") <= 0 {
		t.Error("the unchanged job's run in progress is no longer shown")
	}
	if _, err := s.Run(context.Background(), "search_index", false); !errors.Is(err, ErrBusy) {
		t.Errorf("a second run of the kept job beside its run in progress: %v, want ErrBusy", err)
	}
	if got := nexts(s, r.a); fmt.Sprint(got) != fmt.Sprint(r.nextA) {
		t.Errorf("the kept job's schedule moved: %v, was %v", got, r.nextA)
	}
	after := exposition(t, s, "search_index")
	if stripRunning(after) != stripRunning(r.seriesA) {
		t.Errorf("the kept job's series changed across the reload:\n%s\nwas\n%s", after, r.seriesA)
	}

	// Its run completes into the kept state.
	close(r.releaseA)
	select {
	case err := <-r.doneA:
		if err != nil {
			t.Fatalf("the kept job's run across the reload: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the kept job's run did not end")
	}
	if l := s.Last("search_index"); l == r.lastA || l.Failed() || l.Gaps[MissingTarget] != 1 {
		t.Errorf("the kept job's run across the reload recorded %+v", l)
	}
}

// stripRunning drops the outbox_reconcile_running_seconds lines from an
// exposition: that gauge grows while a run goes on.
func stripRunning(x string) string {
	var keep []string
	for _, l := range strings.Split(x, "\n") {
		if !strings.HasPrefix(l, "outbox_reconcile_running_seconds") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// TestReloadPrepareFails: a reload whose new job cannot be planned leaves
// the scheduler as it was.
func TestReloadPrepareFails(t *testing.T) {
	p := newPair(t, "bigint")
	s := scheduler(t, reloadYAML(p, "24h", "third"), nil)
	before := s.jobs["second"]
	cfg, err := config.Parse([]byte(reloadYAML(p, "12h", "fourth")), nil)
	if err != nil {
		t.Fatal(err)
	}
	// No pool for the target database: the changed job cannot be planned.
	if _, err := s.Prepare(cfg, map[string]*pgxpool.Pool{"main": before.plan.authority}); err == nil {
		t.Fatal("Prepare without the target's pool succeeded")
	}
	if s.jobs["second"] != before || s.job("third") == nil || s.job("fourth") != nil {
		t.Error("a failed Prepare changed the jobs")
	}
}
