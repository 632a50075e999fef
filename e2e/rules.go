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
// ShortFor. Expressions and their range windows stay as generated: each
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
			r.For = model.Duration(ShortFor(time.Duration(d))).String()
		}
	}
	return out, nil
}
