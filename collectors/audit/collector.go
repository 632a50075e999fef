package audit

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

var (
	auditMissingDesc = prometheus.NewDesc(
		vocab.AuditMissingInBroker,
		"Sampled outbox rows marked published longer than the grace ago whose event id is not on the audited topics: events silently lost. /api/v1/audit?outbox= lists the ids.",
		[]string{vocab.LabelOutbox}, nil)
	auditUnmarkedDesc = prometheus.NewDesc(
		vocab.AuditUnmarkedInBroker,
		"Sampled outbox rows still unpublished whose event id reached the topics more than the grace ago: the relay's acknowledgement was lost and a retry will publish a duplicate.",
		[]string{vocab.LabelOutbox}, nil)
	auditDuplicatesDesc = prometheus.NewDesc(
		vocab.AuditDuplicates,
		"Extra copies of sampled event ids seen on the topics within the audit window, counted from the exporter's start (the window re-read at start is not counted again).",
		[]string{vocab.LabelOutbox}, nil)
	auditCheckedDesc = prometheus.NewDesc(
		vocab.AuditChecked,
		"Sampled outbox rows compared with the topics, each counted once when it becomes older than the grace.",
		[]string{vocab.LabelOutbox}, nil)
	auditDeadDesc = prometheus.NewDesc(
		vocab.AuditDeadInBroker,
		"Sampled outbox rows given up as dead whose event id is on the audited topics anyway: consumers may have applied an event the outbox abandoned.",
		[]string{vocab.LabelOutbox}, nil)
	auditWindowDesc = prometheus.NewDesc(
		vocab.AuditWindow,
		"The window the last audit comparison judged: the configured window, or less where the topics' retained (not deleted or compacted) records or the tailer's reading reach back less far. Rows published before it are not judged.",
		[]string{vocab.LabelOutbox}, nil)
	auditMalformedDesc = prometheus.NewDesc(
		vocab.AuditMalformedRecords,
		"Records on the audited topics with no readable event id (no header, no key, bad JSON); they are skipped.",
		[]string{vocab.LabelOutbox}, nil)
)

// Collector exports one outbox's publish audit. The auditor tails the topics
// and compares in the background; Update only reads its last results, so
// a scrape never waits for Kafka or the outbox query.
type Collector struct {
	a *Auditor
}

// NewCollector returns the collector of a started auditor.
func NewCollector(a *Auditor) *Collector { return &Collector{a: a} }

// Name implements Collector.
func (c *Collector) Name() string { return "audit" }

// Target implements Collector: the audited outbox.
func (c *Collector) Target() string { return c.a.Name() }

// Describe implements Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- auditMissingDesc
	ch <- auditUnmarkedDesc
	ch <- auditDuplicatesDesc
	ch <- auditCheckedDesc
	ch <- auditMalformedDesc
	ch <- auditInversionsDesc
	ch <- auditDeadDesc
	ch <- auditWindowDesc
}

// Update implements Collector. The finding gauges appear once the tailer
// has read the window and the first comparison ran; before, they would
// claim a clean audit that was not made. It fails when the last
// comparison or the tailer failed. While the last comparison found the
// ids written differently on the two sides (mismatch.go), the missing
// gauge is withheld, so that a format mismatch does not page as
// thousands of silent losses, and Update fails naming the mismatch
// (outbox_exporter_collector_success 0).
func (c *Collector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	s := c.a.Stats()
	name := c.a.Name()
	send := func(m prometheus.Metric) bool {
		select {
		case ch <- m:
			return true
		case <-ctx.Done():
			return false
		}
	}
	ms := []prometheus.Metric{
		prometheus.MustNewConstMetric(auditDuplicatesDesc, prometheus.CounterValue, float64(s.Duplicates), name),
		prometheus.MustNewConstMetric(auditCheckedDesc, prometheus.CounterValue, float64(s.Checked), name),
		prometheus.MustNewConstMetric(auditMalformedDesc, prometheus.CounterValue, float64(s.Malformed), name),
	}
	ms = append(ms, c.a.orderMetrics()...)
	if s.Compared {
		ms = append(ms,
			prometheus.MustNewConstMetric(auditUnmarkedDesc, prometheus.GaugeValue, float64(s.Unmarked), name),
			prometheus.MustNewConstMetric(auditDeadDesc, prometheus.GaugeValue, float64(s.Dead), name),
			prometheus.MustNewConstMetric(auditWindowDesc, prometheus.GaugeValue, s.Span.Seconds(), name))
		if s.Mismatch == "" {
			ms = append(ms, prometheus.MustNewConstMetric(auditMissingDesc, prometheus.GaugeValue, float64(s.Missing), name))
		}
	}
	for _, m := range ms {
		if !send(m) {
			return fmt.Errorf("audit %q: %w", name, ctx.Err())
		}
	}
	if s.Err != nil {
		return fmt.Errorf("audit %q: %w", name, s.Err)
	}
	if s.Mismatch != "" {
		return fmt.Errorf("audit %q: event ids do not match between table and topics, missing_in_broker withheld: %s", name, s.Mismatch)
	}
	return nil
}
