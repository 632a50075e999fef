package leader

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

var leaderDesc = prometheus.NewDesc(vocab.ExporterLeader,
	"1 on the replica that leads this task (reconcile/NAME, audit/NAME), 0 on a replica that stands by: only the leader runs it and exports its findings.",
	[]string{vocab.LabelTask}, nil)

// Collector exports outbox_exporter_leader for every task of an Elector.
type Collector struct{ e *Elector }

// NewCollector returns the collector of e.
func NewCollector(e *Elector) *Collector { return &Collector{e: e} }

// Name implements collectors.Collector.
func (c *Collector) Name() string { return "leader" }

// Target implements collectors.Collector.
func (c *Collector) Target() string { return "election" }

// Describe implements collectors.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) { ch <- leaderDesc }

// Update implements collectors.Collector: it reads the Elector's state,
// no query.
func (c *Collector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	for _, s := range c.e.Status() {
		v := 0.0
		if s.Leading {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(leaderDesc, prometheus.GaugeValue, v, s.Task)
	}
	return nil
}
