// Package dashboards builds the Grafana dashboards made for one
// outbox_exporter configuration with the Grafana Foundation SDK.
//
// Every dashboard follows the rules of grafana/dashboard-linter: a
// datasource variable named "datasource", multi-value "job" and "instance"
// query variables whose "All" is ".+", every panel on "${datasource}"
// with a title, a description and a unit, rate() and increase() over
// $__rate_interval, and counters only inside them.
package dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// Tag is put on every generated dashboard; their links find each other
// through it.
const Tag = "outbox_exporter"

// File is a generated dashboard and the file name it is written to.
type File struct {
	Name      string
	Dashboard dashboard.Dashboard
}

// All builds every dashboard that cfg has data for: the outbox overview and
// the exporter's health always, consumers with a kafka section, reconcile
// with a reconcile section, audit with an audit section.
func All(cfg *config.Config) ([]File, error) {
	if cfg == nil {
		return nil, fmt.Errorf("build dashboards: no config")
	}
	type gen struct {
		name  string
		build func(*config.Config) (dashboard.Dashboard, error)
		want  bool
	}
	gens := []gen{
		{"outbox-overview.json", Overview, true},
		{"outbox-consumers.json", Consumers, len(cfg.Kafka) > 0},
		{"outbox-reconcile.json", Reconcile, len(cfg.Reconcile) > 0},
		{"outbox-audit.json", Audit, len(cfg.Audit) > 0},
		{"outbox-cdc.json", CDC, len(cfg.CDC) > 0},
		{"outbox-exporter.json", Exporter, true},
	}
	var out []File
	for _, g := range gens {
		if !g.want {
			continue
		}
		d, err := g.build(cfg)
		if err != nil {
			return nil, fmt.Errorf("build dashboard %s: %w", g.name, err)
		}
		out = append(out, File{Name: g.name, Dashboard: d})
	}
	return out, nil
}

// Marshal renders a dashboard as indented JSON ending in a newline.
func Marshal(d dashboard.Dashboard) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, fmt.Errorf("encode dashboard %q: %w", derefString(d.Uid), err)
	}
	return buf.Bytes(), nil
}

func derefString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// outboxLabels returns the label names configured on any outbox, in the
// order first written, outboxes taken by name.
func outboxLabels(cfg *config.Config) []string {
	var names []string
	seen := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(cfg.Outboxes)) {
		for _, l := range cfg.Outboxes[name].Labels {
			if !seen[l.Name] {
				seen[l.Name] = true
				names = append(names, l.Name)
			}
		}
	}
	return names
}

// legend returns a legend format naming each label: "{{outbox}} {{event_type}}".
func legend(labels ...string) string {
	parts := make([]string, len(labels))
	for i, l := range labels {
		parts[i] = "{{" + l + "}}"
	}
	return strings.Join(parts, " ")
}
