package alerts

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// SLOWindows are the windows the publish-SLO error ratio is recorded over:
// the burn-rate alert windows of the SRE workbook and the 30 days the
// error budget is counted over.
var SLOWindows = []string{"5m", "30m", "1h", "2h", "6h", "1d", "3d", "30d"}

// BudgetWindow is the window the error budget is counted over. Its ratio
// is built from the 5-minute recordings, not from rate() over raw
// counters: Prometheus keeps 15 days by default, and a 30-day range over
// raw counters of many label values is heavy. The ratio is only as long
// as the retention of the recordings (see README, "Alerting").
const BudgetWindow = "30d"

// ErrorRatioRecord is the name of the recording rule holding the share of
// events published after their deadline over window.
func ErrorRatioRecord(window string) string {
	return "outbox:published_late_events:ratio_rate" + window
}

// Names of the 5-minute rates the 30-day ratio adds up.
const (
	PublishedRateRecord = "outbox:published_events:rate5m"
	LateRateRecord      = "outbox:published_late_events:rate5m"
)

// burn is one multiwindow burn-rate condition: the error ratio over both
// the long and the short window exceeds factor times the error budget.
type burn struct {
	factor      float64
	long, short string
	severity    string
	forDur      string
}

// Burn-rate conditions of the SRE workbook: 2% of a 30-day budget in an
// hour and 5% in six hours page; 10% in three days and the whole budget
// at the rate of one in three days open a ticket. Each is a rule of its
// own, told apart by its long and short labels (as pyrra does), so that
// the description can say how soon the budget is gone.
var burns = []burn{
	{14.4, "1h", "5m", SeverityCritical, "2m"},
	{6, "6h", "30m", SeverityCritical, "15m"},
	{3, "1d", "2h", SeverityWarning, "1h"},
	{1, "3d", "6h", SeverityWarning, "3h"},
}

// says fills the burn-rate text for condition c against objective: its
// windows, its for: and how many days the budget lasts at its rate.
func (c burn) says(objective string) says {
	days := strconv.FormatFloat(float64(int(300/c.factor+0.5))/10, 'f', -1, 64)
	return says{severity: c.severity, forDur: c.forDur,
		fill: []string{"long", c.long, "short", c.short, "objective", objective, "days", days}}
}

// MinLateEvents is the low-traffic guard of the burn-rate alerts: the
// long window must hold at least this many late events. One late event
// among a handful an hour is a large ratio but no reason to page.
const MinLateEvents = 3

// sloRecords are the error ratios of the publish-within-deadline SLO: of
// the events seen becoming published, the share published late.
func (b *builder) sloRecords() []Rule {
	if !b.anySLO() {
		return nil
	}
	by := b.by(vocab.LabelOutbox)
	rules := []Rule{
		{Record: PublishedRateRecord, Expr: fmt.Sprintf("sum by (%s) (rate("+vocab.OutboxPublished+"%s[5m]))", by, b.selector())},
		{Record: LateRateRecord, Expr: fmt.Sprintf("sum by (%s) (rate("+vocab.OutboxPublishedLate+"%s[5m]))", by, b.selector())},
	}
	for _, w := range SLOWindows {
		expr := fmt.Sprintf("sum by (%s) (rate("+vocab.OutboxPublishedLate+"%s[%s]))\n/\nsum by (%s) (rate("+vocab.OutboxPublished+"%s[%s]))",
			by, b.selector(), w, by, b.selector(), w)
		if w == BudgetWindow {
			// Sums of equally spaced 5-minute rates are proportional to
			// the counts: their quotient is the 30-day share of late
			// events, not an average of ratios.
			expr = fmt.Sprintf("sum_over_time(%s[%s])\n/\nsum_over_time(%s[%s])", LateRateRecord, w, PublishedRateRecord, w)
		}
		rules = append(rules, Rule{Record: ErrorRatioRecord(w), Expr: expr})
	}
	return rules
}

// anySLO reports whether any outbox exports publish counts.
func (b *builder) anySLO() bool {
	for _, o := range b.cfg.Outboxes {
		if o.PublishedAt != "" {
			return true
		}
	}
	return false
}

// sloAlerts are the multiwindow multi-burn-rate alerts of each outbox
// whose publish time is known, against its own objective.
func (b *builder) sloAlerts() []Rule {
	var rules []Rule
	for _, name := range slices.Sorted(maps.Keys(b.cfg.Outboxes)) {
		o := b.cfg.Outboxes[name]
		if o.PublishedAt == "" {
			continue
		}
		obj := strconv.FormatFloat(o.SLOObjective, 'f', -1, 64)
		pct := strconv.FormatFloat(o.SLOObjective*100, 'f', -1, 64) + "%"
		for _, c := range burns {
			rules = append(rules, b.alert("OutboxPublishDeadlineBudgetBurn", b.burnExpr(name, o, obj, c),
				c.says("its objective of "+pct+" on time"),
				map[string]string{"outbox": name, "long": c.long, "short": c.short}))
		}
	}
	return rules
}

// burnExpr is one burn condition of one outbox with objective obj, guarded
// against low traffic. The guard counts each late event once however many
// replicas saw it: every replica counts the same events, so the counts of
// one label set are taken as their largest over the replicas (by) before
// the label sets are added up.
func (b *builder) burnExpr(outbox string, o *config.Outbox, obj string, c burn) string {
	m := "{" + eq(vocab.LabelOutbox, outbox) + "}"
	f := strconv.FormatFloat(c.factor, 'f', -1, 64)
	return fmt.Sprintf("%s%s > (%s * (1 - %s))\nand\n%s%s > (%s * (1 - %s))\nand on (%s)\nsum by (%s) (max by (%s) (increase("+vocab.OutboxPublishedLate+"%s[%s]))) >= %d",
		ErrorRatioRecord(c.long), m, f, obj, ErrorRatioRecord(c.short), m, f, obj,
		b.by(vocab.LabelOutbox), b.by(vocab.LabelOutbox), b.outboxBy(o), b.selector(eq(vocab.LabelOutbox, outbox)), c.long, MinLateEvents)
}
