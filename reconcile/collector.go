package reconcile

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/collectors"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

var (
	gapsDesc = prometheus.NewDesc(vocab.ReconcileGaps,
		"Gaps found by the last completed reconcile run, by kind: missing_outbox (committed row without outbox row), missing_target (published event not in the target), stale_target (target behind the authority), orphan_target (target row the authority lacks or is behind), duplicate_target (a key the target holds more than once).",
		[]string{vocab.LabelReconcile, vocab.LabelKind}, nil)
	rowsCheckedDesc = prometheus.NewDesc(vocab.ReconcileRowsChecked,
		"Authority rows judged by the last completed reconcile run.",
		[]string{vocab.LabelReconcile}, nil)
	lastSuccessDesc = prometheus.NewDesc(vocab.ReconcileLastSuccess,
		"Unix time at which the last successful reconcile run ended.",
		[]string{vocab.LabelReconcile}, nil)
	runDurationDesc = prometheus.NewDesc(vocab.ReconcileDuration,
		"Length of the last reconcile run, completed or failed.",
		[]string{vocab.LabelReconcile}, nil)
	runningDesc = prometheus.NewDesc(vocab.ReconcileRunning,
		"How long the reconcile run in progress has been running; 0 when none is.",
		[]string{vocab.LabelReconcile}, nil)
)

// Collector exports one job's reconcile metrics from the Scheduler's
// results; it reads no database. Before the first completed run it
// exports no gaps, rows or timestamp. After a failed run the gaps, rows
// and timestamp of the last completed run stay (the timestamp ages, which
// is what to alert on), the duration is the failed run's, and Update
// returns the run's error, so outbox_exporter_collector_success{collector=
// "reconcile"} is 0 until a run completes again.
type Collector struct {
	s   *Scheduler
	job string
}

var _ collectors.Collector = (*Collector)(nil)

// Collectors returns one Collector per job, in job name order.
func (s *Scheduler) Collectors() []collectors.Collector {
	names := s.Jobs()
	out := make([]collectors.Collector, 0, len(names))
	for _, n := range names {
		out = append(out, &Collector{s: s, job: n})
	}
	return out
}

// Name implements collectors.Collector.
func (c *Collector) Name() string { return "reconcile" }

// Target implements collectors.Collector: the job name.
func (c *Collector) Target() string { return c.job }

// Describe implements collectors.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- gapsDesc
	ch <- rowsCheckedDesc
	ch <- lastSuccessDesc
	ch <- runDurationDesc
	ch <- runningDesc
}

// Update implements collectors.Collector.
func (c *Collector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	if c.s.job(c.job) == nil {
		// A reload removed the job: its series end with it.
		return nil
	}
	last, ok := c.s.state(c.job)
	ch <- prometheus.MustNewConstMetric(runningDesc, prometheus.GaugeValue, c.s.running(c.job).Seconds(), c.job)
	if ok != nil {
		for _, k := range Kinds {
			ch <- prometheus.MustNewConstMetric(gapsDesc, prometheus.GaugeValue, float64(ok.Gaps[k]), c.job, string(k))
		}
		ch <- prometheus.MustNewConstMetric(rowsCheckedDesc, prometheus.GaugeValue, float64(ok.RowsChecked), c.job)
		ch <- prometheus.MustNewConstMetric(lastSuccessDesc, prometheus.GaugeValue, float64(ok.Finished.UnixNano())/1e9, c.job)
	}
	if last != nil {
		ch <- prometheus.MustNewConstMetric(runDurationDesc, prometheus.GaugeValue, last.Duration, c.job)
		if last.Failed() {
			return fmt.Errorf("last reconcile run failed: %s", last.Error)
		}
	}
	return nil
}
