// Package settings exports the config's thresholds that no collector
// exports with its own series: each outbox's publish objective and each
// reconcile job's interval. With them, and the deadlines the outbox, Kafka
// and CDC collectors export, one rule file serves every config: the rules
// read each threshold from the series of the thing it judges.
package settings

import (
	"context"
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/alerts"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

var (
	objectiveDesc = prometheus.NewDesc(vocab.SLOObjective,
		"The share of an outbox's events that should be published within their deadline (its slo_objective). Only for outboxes whose publish time is read (published_at).",
		[]string{"outbox"}, nil)
	intervalDesc = prometheus.NewDesc(vocab.ReconcileInterval,
		"The longest time between two scheduled runs of a reconcile job, worked out from its schedule. The alerts expect a success at least this often.",
		[]string{"reconcile"}, nil)
)

// Collector exports the settings of one config. Its values change only on
// a reload, which builds a new Collector.
type Collector struct {
	objectives map[string]float64
	intervals  map[string]float64
}

// New returns the settings collector of cfg.
func New(cfg *config.Config) *Collector {
	c := &Collector{objectives: map[string]float64{}, intervals: map[string]float64{}}
	for name, o := range cfg.Outboxes {
		if o.PublishedAt != "" {
			c.objectives[name] = o.SLOObjective
		}
	}
	for name, r := range cfg.Reconcile {
		c.intervals[name] = alerts.ScheduleInterval(r.Schedule).Seconds()
	}
	return c
}

// Name implements collectors.Collector.
func (c *Collector) Name() string { return "settings" }

// Target implements collectors.Collector: the settings are the config's.
func (c *Collector) Target() string { return "config" }

// Describe implements collectors.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- objectiveDesc
	ch <- intervalDesc
}

// Update implements collectors.Collector. It reads nothing and cannot
// fail.
func (c *Collector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	for _, name := range slices.Sorted(maps.Keys(c.objectives)) {
		ch <- prometheus.MustNewConstMetric(objectiveDesc, prometheus.GaugeValue, c.objectives[name], name)
	}
	for _, name := range slices.Sorted(maps.Keys(c.intervals)) {
		ch <- prometheus.MustNewConstMetric(intervalDesc, prometheus.GaugeValue, c.intervals[name], name)
	}
	return nil
}
