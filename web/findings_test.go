package web

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/outbox-exporter/outbox_exporter/alerts"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
	"github.com/outbox-exporter/outbox_exporter/reconcile"
)

// TestFindingColourIsAlertSeverity: for every finding the exporter
// reports (each reconcile gap kind, each audit finding), a job or an audit
// showing only that finding is coloured on the page as the alert that
// fires on it is labelled: red for a critical alert, amber for a warning.
// A finding no alert selects is amber: the page never shows red what does
// not page. The alerts are found by what their expressions select, parsed,
// not by name.
func TestFindingColourIsAlertSeverity(t *testing.T) {
	// The rules of a configuration with reconcile jobs and an audit, as the
	// alerts package's own tests use it.
	cfg, err := config.LoadWithoutSecrets("../alerts/testdata/multi.yml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Reconcile) == 0 || len(cfg.Audit) == 0 {
		t.Fatal("the configuration has no reconcile job or no audit: their alerts would not be built")
	}
	file, err := alerts.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range reconcile.Kinds {
		if _, ok := vocab.SeverityOf(vocab.ReconcileGaps, string(kind)); !ok {
			t.Errorf("reconcile gap kind %s has no severity", kind)
		}
	}
	colour := map[string]Status{string(vocab.Critical): Crit, string(vocab.Warning): Warn}
	for _, f := range vocab.Findings {
		name := f.Metric
		if f.Kind != "" {
			name += "{kind=" + f.Kind + "}"
		}
		sevs := alertSeverities(t, file, f)
		page := pageStatus(t, f)
		switch {
		case len(sevs) == 0 && page != Warn:
			t.Errorf("%s: no alert fires on it, but the page colours it %q", name, page)
		case len(sevs) > 1:
			t.Errorf("%s: alerts of severities %v fire on it", name, sevs)
		case len(sevs) == 1 && colour[sevs[0]] != page:
			t.Errorf("%s: its alert is %s, but the page colours it %q", name, sevs[0], page)
		}
	}
}

// alertSeverities returns the distinct severities of the alerts whose
// expression selects the series of finding f (kind="" when it has none),
// whatever their other matchers (job, cluster) ask.
func alertSeverities(t *testing.T, file alerts.File, f vocab.Finding) []string {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	var out []string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Fatalf("alert %s: %v", r.Alert, err)
			}
			for _, sel := range parser.ExtractSelectors(expr) {
				if selects(sel, f) && !slices.Contains(out, r.Labels["severity"]) {
					out = append(out, r.Labels["severity"])
				}
			}
		}
	}
	return out
}

// selects reports whether the matchers select the series of finding f.
func selects(ms []*labels.Matcher, f vocab.Finding) bool {
	named := false
	for _, m := range ms {
		switch m.Name {
		case labels.MetricName:
			if !m.Matches(f.Metric) {
				return false
			}
			named = true
		case vocab.LabelKind:
			if !m.Matches(f.Kind) {
				return false
			}
		}
	}
	return named
}

// pageStatus returns the colour the page gives a reconcile job or an
// audit whose only finding is one of f.
func pageStatus(t *testing.T, f vocab.Finding) Status {
	t.Helper()
	now := time.Now()
	one := func(l map[string]string, v float64) []Sample { return []Sample{{Labels: l, Value: v}} }
	switch f.Metric {
	case vocab.ReconcileGaps:
		job := map[string]string{vocab.LabelReconcile: "j"}
		snap := &Snapshot{At: now, Metrics: map[string][]Sample{
			vocab.ReconcileRowsChecked: one(job, 100),
			vocab.ReconcileLastSuccess: one(job, float64(now.Unix())),
			vocab.ReconcileGaps:        one(map[string]string{vocab.LabelReconcile: "j", vocab.LabelKind: f.Kind}, 1),
		}}
		views := (&Server{}).reconcileViews(snap, map[string]bool{"reconcile/j": true}, now)
		if len(views) != 1 {
			t.Fatalf("%d reconcile views, want 1", len(views))
		}
		return views[0].Status
	case vocab.AuditMissingInBroker, vocab.AuditUnmarkedInBroker, vocab.AuditDuplicates:
		ob := map[string]string{vocab.LabelOutbox: "o"}
		snap := &Snapshot{At: now, Metrics: map[string][]Sample{vocab.AuditChecked: one(ob, 100), f.Metric: one(ob, 1)}}
		views := auditViews(snap, map[string]bool{"audit/o": true})
		if len(views) != 1 {
			t.Fatalf("%d audit views, want 1", len(views))
		}
		return views[0].Status
	}
	t.Fatal(fmt.Sprintf("finding %s has no view on the page", f.Metric))
	return ""
}
