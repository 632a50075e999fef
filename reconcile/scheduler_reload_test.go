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

// TestReloadPerJob: a reload that changes job "second", removes "third"
// and adds "fourth" keeps "search_index" whole: its last results, last
// success and series unchanged, its run in progress going on (the choice:
// an unchanged job's run continues in the kept state, and completes into
// it), its places in the schedule. The changed job starts afresh, its run
// in progress cancelled and logged; the removed job's series end (issue
// 14, item 4).
func TestReloadPerJob(t *testing.T) {
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
	a, b := s.jobs["search_index"], s.jobs["second"]
	lastA := s.Last("search_index")
	seriesA := exposition(t, s, "search_index")
	if !strings.Contains(seriesA, `outbox_reconcile_gaps{kind="missing_target",reconcile="search_index"} 1`) {
		t.Fatalf("search_index before the reload:\n%s", seriesA)
	}
	nextA := nexts(s, a)
	if len(nextA) != 1 || nextA[0].IsZero() {
		t.Fatalf("search_index's schedule: %v", nextA)
	}

	// A run of each of search_index and second in progress, held at
	// their start until released (or cancelled).
	hold := func(js *jobState) (started, release chan struct{}, done chan error) {
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
	startedA, releaseA, doneA := hold(a)
	startedB, _, doneB := hold(b)
	go func() { _, err := s.Run(ctx, "search_index", true); doneA <- err }()
	go func() { _, err := s.Run(ctx, "second", true); doneB <- err }()
	for _, c := range []chan struct{}{startedA, startedB} {
		select {
		case <-c:
		case <-time.After(30 * time.Second):
			t.Fatal("a held run did not start")
		}
	}

	cfg, err := config.Parse([]byte(reloadYAML(p, "12h", "fourth")), nil)
	if err != nil {
		t.Fatal(err)
	}
	pools := map[string]*pgxpool.Pool{"main": a.plan.authority, "search": a.plan.target}
	rl, err := s.Prepare(cfg, pools)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rl.Kept, rl.Fresh, rl.Removed) != "[search_index] [fourth second] [third]" {
		t.Errorf("kept, fresh, removed = %v %v %v", rl.Kept, rl.Fresh, rl.Removed)
	}
	if s.job("third") == nil || s.jobs["second"] != b {
		t.Fatal("Prepare changed the scheduler before Apply")
	}
	rl.Apply()

	// The changed job's run was cancelled (Apply waited for it) and
	// logged; its new state has no result yet.
	select {
	case err := <-doneB:
		if err == nil || !errors.Is(err, context.Canceled) {
			t.Errorf("second's run across the reload: %v, want cancelled", err)
		}
	default:
		t.Error("Apply returned before the changed job's run ended")
	}
	if !strings.Contains(logs.String(), "reconcile run cancelled: a config reload changed its job") {
		t.Errorf("the cancelled run was not logged:\n%s", logs)
	}
	if s.jobs["second"] == b || s.Last("second") != nil || s.jobs["second"].plan.job.Window != 12*time.Hour {
		t.Error("the changed job kept its old state")
	}
	// The removed job: no series, no runs.
	if got := exposition(t, s, "third"); got != "" {
		t.Errorf("the removed job still exports:\n%s", got)
	}
	if _, err := s.Run(ctx, "third", true); !errors.Is(err, ErrUnknownJob) {
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

	// The kept job: same state, still running, same series, same places
	// in the schedule.
	if s.jobs["search_index"] != a || s.Last("search_index") != lastA {
		t.Fatal("the unchanged job's state was replaced")
	}
	if s.running("search_index") <= 0 {
		t.Error("the unchanged job's run in progress is no longer shown")
	}
	if _, err := s.Run(ctx, "search_index", false); !errors.Is(err, ErrBusy) {
		t.Errorf("a second run of the kept job beside its run in progress: %v, want ErrBusy", err)
	}
	if got := nexts(s, a); fmt.Sprint(got) != fmt.Sprint(nextA) {
		t.Errorf("the kept job's schedule moved: %v, was %v", got, nextA)
	}
	after := exposition(t, s, "search_index")
	if strip := func(x string) string {
		var keep []string
		for _, l := range strings.Split(x, "\n") {
			if !strings.HasPrefix(l, "outbox_reconcile_running_seconds") {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "\n")
	}; strip(after) != strip(seriesA) {
		t.Errorf("the kept job's series changed across the reload:\n%s\nwas\n%s", after, seriesA)
	}

	// Its run completes into the kept state.
	close(releaseA)
	select {
	case err := <-doneA:
		if err != nil {
			t.Fatalf("the kept job's run across the reload: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the kept job's run did not end")
	}
	if l := s.Last("search_index"); l == lastA || l.Failed() || l.Gaps[MissingTarget] != 1 {
		t.Errorf("the kept job's run across the reload recorded %+v", l)
	}
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
