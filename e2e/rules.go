package e2e

import (
	"fmt"
	"time"

	"github.com/prometheus/common/model"

	"github.com/outbox-exporter/outbox_exporter/alerts"
)

// ForScale is how much shorter the test makes every alert's for: than the
// generated one, and MinFor the shortest for: it gives: three evaluation
// intervals of 2s, so that one slow scrape or evaluation cannot fire an
// alert on its own. A generated 1m becomes 6s, 5m 6s, 10m 10s, 15m 15s.
const (
	ForScale = 60
	MinFor   = 6 * time.Second
)

// ScrapeWait is how long the test waits for Prometheus's first scrape of
// the exporter, and StartupFor the shortest for: it gives the alerts on
// scraping and collecting themselves (ScrapeAlerts): longer than
// ScrapeWait, so that on a busy machine, where Prometheus's first scrape
// or the exporter's first collections come late, they cannot fire before
// the first scrape lands. Prometheus evaluates rules from its start, and
// absent() is true until then. No fault of the test raises them, so the
// longer for: costs the test nothing.
const (
	ScrapeWait = time.Minute
	StartupFor = 2 * ScrapeWait
)

// ScrapeAlerts are the alerts on the scrape and the exporter's own
// collections, and on consumer groups (whose members join after the
// exporter's first collection).
var ScrapeAlerts = map[string]bool{
	"OutboxExporterAbsent":             true,
	"OutboxExporterTargetDown":         true,
	"OutboxCollectorFailing":           true,
	"OutboxCollectorFailingEverywhere": true,
	"OutboxConsumerGroupEmpty":         true,
}

// ShortFor returns the for: the test gives a rule whose generated for: is
// d: d/ForScale, at least MinFor. A zero d stays zero (the alert fires on
// its first evaluation, as generated).
func ShortFor(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return max(d/ForScale, MinFor)
}

// ShortenRules returns a copy of f with every alert's for: shortened by
// ShortFor, and no shorter than StartupFor for the ScrapeAlerts. Expressions and their range windows stay as generated: each
// window (rate over 10m, the SLO ratios up to 30d) works on a few minutes
// of data, since rate needs only two samples inside it.
func ShortenRules(f alerts.File) (alerts.File, error) {
	out := alerts.File{Groups: make([]alerts.Group, len(f.Groups))}
	for i, g := range f.Groups {
		out.Groups[i] = alerts.Group{Name: g.Name, Rules: append([]alerts.Rule(nil), g.Rules...)}
		for j := range out.Groups[i].Rules {
			r := &out.Groups[i].Rules[j]
			if r.Alert == "" || r.For == "" {
				continue
			}
			d, err := model.ParseDuration(r.For)
			if err != nil {
				return alerts.File{}, fmt.Errorf("shorten rule %s in group %s: for %q: %w", r.Alert, g.Name, r.For, err)
			}
			short := ShortFor(time.Duration(d))
			if ScrapeAlerts[r.Alert] {
				short = max(short, StartupFor)
			}
			r.For = model.Duration(short).String()
		}
	}
	return out, nil
}
