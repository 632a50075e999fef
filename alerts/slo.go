package alerts

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// SLOWindows are the windows the publish-SLO error ratio is recorded over:
// the burn-rate alert windows of the SRE workbook and the 30 days the
// error budget is counted over.
var SLOWindows = []string{"5m", "30m", "1h", "2h", "6h", "1d", "3d", "30d"}

// ErrorRatioRecord is the name of the recording rule holding the share of
// events published after their deadline over window.
func ErrorRatioRecord(window string) string {
	return "outbox:published_late_events:ratio_rate" + window
}

// burn is one multiwindow burn-rate condition: the error ratio over both
// the long and the short window exceeds factor times the error budget.
type burn struct {
	factor      string
	long, short string
}

// Burn-rate conditions of the SRE workbook: 2% of a 30-day budget in an
// hour and 5% in six hours page; 10% in three days and the whole budget
// at the rate of one in three days open a ticket.
var (
	pageBurns   = []burn{{"14.4", "1h", "5m"}, {"6", "6h", "30m"}}
	ticketBurns = []burn{{"3", "1d", "2h"}, {"1", "3d", "6h"}}
)

// sloRecords are the error ratios of the publish-within-deadline SLO: of
// the events seen becoming published, the share published late.
func (b *builder) sloRecords() []Rule {
	if !b.anySLO() {
		return nil
	}
	var rules []Rule
	for _, w := range SLOWindows {
		rules = append(rules, Rule{
			Record: ErrorRatioRecord(w),
			Expr: fmt.Sprintf("sum by (job, outbox) (rate(outbox_published_late_events_total%s[%s]))\n/\nsum by (job, outbox) (rate(outbox_published_events_total%s[%s]))",
				b.selector(), w, b.selector(), w),
		})
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
		rules = append(rules,
			b.alert("OutboxPublishDeadlineBudgetBurn", SeverityCritical, burnExpr(name, obj, pageBurns), "2m",
				"Events are published late fast enough to spend the error budget within days.",
				"{{ $value | humanizePercentage }} of the events of outbox {{ $labels.outbox }} were published after their deadline over the last hour (or six hours); the objective is "+pct+" on time. At this rate the 30-day error budget is gone in two days or less.",
				nil),
			b.alert("OutboxPublishDeadlineBudgetBurn", SeverityWarning, burnExpr(name, obj, ticketBurns), "15m",
				"Events are published late fast enough to spend the error budget this month.",
				"{{ $value | humanizePercentage }} of the events of outbox {{ $labels.outbox }} were published after their deadline over the last day (or three days); the objective is "+pct+" on time. At this rate the 30-day error budget is gone before the month ends.",
				nil),
		)
	}
	return rules
}

// burnExpr ORs the burn conditions of one outbox with objective obj.
func burnExpr(outbox, obj string, burns []burn) string {
	m := "{" + eq("outbox", outbox) + "}"
	var s string
	for i, c := range burns {
		if i > 0 {
			s += "\nor\n"
		}
		s += fmt.Sprintf("(\n  %s%s > (%s * (1 - %s))\nand\n  %s%s > (%s * (1 - %s))\n)",
			ErrorRatioRecord(c.long), m, c.factor, obj, ErrorRatioRecord(c.short), m, c.factor, obj)
	}
	return s
}
