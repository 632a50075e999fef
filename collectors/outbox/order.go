package outbox

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// Per-aggregate order: two events of one aggregate, E1 and its successor
// E2, are committed in order; two relays work the table, and E1 is stuck
// on one of them while the other publishes E2. The broker keeps only the
// order it received, so the inversion is visible only here, while E1 is
// still unpublished: an unpublished row whose aggregate already has a
// published row with a higher sequence.
//
// Probing every unpublished row at every scrape would cost as much as
// the state count again, so the rows are followed instead (order_track.go):
// a full scan at start and every OrderRescanEvery finds the overtaken
// aggregates (it reads at most max_count+1 unpublished rows and probes
// each once through the (aggregate, sequence) index of published rows);
// between full scans, each row read by the published-rows watermark is
// probed once for an unpublished predecessor, and only the aggregates
// known to be overtaken are counted again. Below max_count the gauge is
// exact for inversions made by a publish (E10 published while E9 waits);
// one made by an unpublished row written below an already published
// sequence (a late commit, a restarted sequence) shows at the next full
// scan. Without published_at there is no watermark, and every sample is
// a full scan.
//
// A gap (9 then 11, 10 never written) is not an inversion: only a
// published row with a higher sequence and an unpublished one with a
// lower sequence make one. An aggregate whose sequence restarts (the
// aggregate deleted and created anew under the same id, counting from 1
// again) while published rows of its earlier life are still in the table
// shows its new unpublished rows as overtaken until those rows are
// purged; the metric cannot tell the two lives apart, so such
// applications should give the new life a new aggregate id.

var (
	outboxOutOfOrderHelp = "Unpublished rows of an aggregate whose later row (higher sequence) is already published: consumers see the successor before it. A lower bound while outbox_events_capped is 1."
	outboxNoReceiptHelp  = "Rows seen becoming published with no receipt (the receipt column NULL or empty): marked sent without the downstream's confirmation, e.g. by hand."
)

func init() {
	outboxDescribe = append(outboxDescribe,
		prometheus.NewDesc(vocab.OutboxOutOfOrder, outboxOutOfOrderHelp, []string{vocab.LabelOutbox}, nil),
		prometheus.NewDesc(vocab.OutboxPublishedNoReceipt, outboxNoReceiptHelp, []string{vocab.LabelOutbox}, nil))
}

// orderDescs are the order and receipt descriptors with an outbox's label
// columns.
type orderDescs struct {
	outOfOrder, noReceipt *prometheus.Desc
}

func newOrderDescs(o *config.Outbox) orderDescs {
	l := []string{vocab.LabelOutbox}
	for _, x := range o.Labels {
		l = append(l, x.Name)
	}
	return orderDescs{
		outOfOrder: prometheus.NewDesc(vocab.OutboxOutOfOrder, outboxOutOfOrderHelp, l, nil),
		noReceipt:  prometheus.NewDesc(vocab.OutboxPublishedNoReceipt, outboxNoReceiptHelp, l, nil),
	}
}

// sendOrder sends one series' order and receipt metrics, when configured.
func (c *Collector) sendOrder(gauge, counter func(*prometheus.Desc, float64, ...string), s Series, l []string) {
	d := c.order
	if outboxsql.OrderEnabled(c.o) {
		gauge(d.outOfOrder, s.OutOfOrder, l...)
	}
	if c.o.Receipt != "" && c.o.PublishedAt != "" {
		counter(d.noReceipt, float64(s.NoReceipt), l...)
	}
}

// orderNeeds are the column types check wants for aggregate, sequence and
// receipt.
func orderNeeds(o *config.Outbox) []columnNeed {
	var out []columnNeed
	if o.Aggregate != "" {
		out = append(out, columnNeed{"aggregate", o.Aggregate, anyType, ""})
	}
	if o.Sequence != "" {
		out = append(out, columnNeed{"sequence", o.Sequence, func(c outboxsql.Column) bool { return c.IsInteger() || c.Type == "numeric" },
			"an integer or numeric type"})
	}
	if o.Receipt != "" {
		out = append(out, columnNeed{"receipt", o.Receipt, anyType, ""})
	}
	return out
}
