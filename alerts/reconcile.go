package alerts

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// DefaultReconcileInterval is the interval assumed for a reconcile schedule
// whose activations cannot be worked out.
const DefaultReconcileInterval = time.Hour

// Bounds of the time a reconcile run is expected to take: its schedule's
// interval, but at least MinRunTime (a job every minute may well take
// more than a minute on a big window) and at most MaxRunTime (a daily
// job taking a day is stuck, not slow).
const (
	MinRunTime = 5 * time.Minute
	MaxRunTime = 6 * time.Hour
)

// RunLimit is how long a run of a job on schedule may take before
// OutboxReconcileRunTooLong fires.
func RunLimit(schedule string) time.Duration {
	return min(max(ScheduleInterval(schedule), MinRunTime), MaxRunTime)
}

// SuccessLimit is how long a job on schedule may go without a success
// before OutboxReconcileNotSucceeding fires: one interval for the run
// that should have come, and the run's own limit for it to end. It is
// not a multiple of the interval: a daily job alerts a day and a few
// hours after its last success, not three days later.
func SuccessLimit(schedule string) time.Duration {
	return ScheduleInterval(schedule) + RunLimit(schedule)
}

// reconcileAlerts fire on gaps between the authority, the outbox and the
// target, and on reconcile jobs that stopped succeeding or whose run does
// not end.
func (b *builder) reconcileAlerts() []Rule {
	if len(b.cfg.Reconcile) == 0 {
		return nil
	}
	rules := b.reconcileGapAlerts()
	for _, name := range slices.Sorted(maps.Keys(b.cfg.Reconcile)) {
		rules = append(rules, b.reconcileJobAlerts(name, b.cfg.Reconcile[name])...)
	}
	return rules
}

// reconcileGapAlerts fire on the gaps any job finds. The gaps of critical
// severity page on their own alert; every other kind opens a ticket on
// the shared one.
func (b *builder) reconcileGapAlerts() []Rule {
	critical := vocab.GapKindsOf(vocab.Critical)
	return []Rule{
		b.alert("OutboxReconcileMissingOutbox",
			fmt.Sprintf("max by (%s) (%s%s) > 0", b.by(vocab.LabelReconcile), vocab.ReconcileGaps, b.selector(kindIn(critical, true))),
			says{}, nil),
		b.alert("OutboxReconcileGaps",
			fmt.Sprintf("max by (%s) (%s%s) > 0", b.by(vocab.LabelReconcile, vocab.LabelKind), vocab.ReconcileGaps, b.selector(kindIn(critical, false))),
			says{}, nil),
	}
}

// reconcileJobAlerts are the alerts on one job's runs, labelled with the
// job so that two jobs' rules are told apart.
func (b *builder) reconcileJobAlerts(name string, r *config.ReconcileJob) []Rule {
	sel := b.selector(eq(vocab.LabelReconcile, name))
	by := b.by(vocab.LabelReconcile)
	limit := int64(SuccessLimit(r.Schedule) / time.Second)
	lookback := model.Duration(SuccessLimit(r.Schedule)).String()
	own := map[string]string{"reconcile": name}
	// The last success is taken over the lookback, not from the current
	// series: the series is gone from a restarted exporter until its next
	// success (a daily job's: up to a day), and a restart must not hide
	// how long ago the job last succeeded. A job monitored at some time in
	// the lookback before that (so for at least the limit) without any
	// success sample since (it never succeeded, or not since before the
	// lookback) gives the limit as its value. The earlier span is a whole
	// lookback, not a moment, so that an exporter down at that moment
	// does not hide the job.
	notSucceeding := fmt.Sprintf("time() - max by (%[1]s) (max_over_time("+vocab.ReconcileLastSuccess+"%[2]s[%[3]s])) > %[4]d\nor\n"+
		"max by (%[1]s) (present_over_time("+vocab.ReconcileRunning+"%[2]s[%[3]s] offset %[3]s)) * %[4]d\nunless on (%[1]s)\nmax by (%[1]s) (present_over_time("+vocab.ReconcileLastSuccess+"%[2]s[%[3]s]))",
		by, sel, lookback, limit)
	run := model.Duration(RunLimit(r.Schedule))
	return []Rule{
		b.alert("OutboxReconcileNotSucceeding", notSucceeding,
			says{fill: []string{"limit", fmt.Sprintf("one interval of its schedule (%s) and the %s a run may take", quoteSchedule(r.Schedule), run)}},
			own),
		b.alert("OutboxReconcileRunTooLong",
			fmt.Sprintf("max by (%s) ("+vocab.ReconcileRunning+"%s) > %d", by, sel, int64(RunLimit(r.Schedule)/time.Second)),
			says{fill: []string{"limit", fmt.Sprintf("the %s a run scheduled %s may take", run, quoteSchedule(r.Schedule))}},
			own),
	}
}

// quoteSchedule renders a schedule for a description.
func quoteSchedule(s string) string {
	if strings.HasPrefix(s, "@every ") {
		return "every " + strings.TrimPrefix(s, "@every ")
	}
	return "at \"" + s + "\""
}

// ScheduleInterval returns the longest time between two runs of a cron
// schedule: the duration of "@every 5m", or the largest gap between the
// activations of a cron spec over 35 days from a fixed date (so that the
// result does not depend on when it is computed). A schedule that does not
// parse gives DefaultReconcileInterval.
func ScheduleInterval(spec string) time.Duration {
	if rest, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every "); ok {
		if d, err := time.ParseDuration(strings.TrimSpace(rest)); err == nil && d > 0 {
			return d
		}
		return DefaultReconcileInterval
	}
	s, err := config.CronParser.Parse(spec)
	if err != nil {
		return DefaultReconcileInterval
	}
	start := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	end := start.Add(35 * 24 * time.Hour)
	var longest time.Duration
	prev := s.Next(start)
	for i := 0; i < 100000 && !prev.IsZero() && prev.Before(end); i++ {
		next := s.Next(prev)
		if next.IsZero() {
			break
		}
		if gap := next.Sub(prev); gap > longest {
			longest = gap
		}
		prev = next
	}
	if longest <= 0 {
		return DefaultReconcileInterval
	}
	return longest
}
