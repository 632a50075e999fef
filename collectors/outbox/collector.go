package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/collectors"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// The outbox collector's descriptors. Label columns are per outbox, so
// these carry only the fixed labels; the per-outbox ones are made by
// outboxDescs and described with the same names and help.
var (
	outboxEventsHelp         = "Unpublished and dead rows of the outbox by state (pending, in_flight, lease_expired, dead). A lower bound while outbox_events_capped is 1."
	outboxOldestHelp         = "Age of the oldest unpublished row in seconds; 0 when none. Exact while counts are capped too, at any number of label combinations, but for a series holding other kept from earlier scrapes that no read found a row of when its bounded read stops early: then a lower bound, logged. On a lagging standby, as of the last replayed commit."
	outboxDeadlineHelp       = "The configured notification deadline of these events in seconds."
	outboxPastDeadlineHelp   = "Unpublished rows older than their deadline. A lower bound while outbox_events_capped is 1."
	outboxRetriedHelp        = "Unpublished rows with attempts > 0. A lower bound while outbox_events_capped is 1."
	outboxUnknownHelp        = "Unpublished rows whose publish result is unknown (status in unknown, lease expired after an attempt, or unknown_when): the broker may hold them, so a retry may duplicate them."
	outboxLeaseExpHelp       = "Distinct (row, lease) expiries observed since the exporter started; each expired lease is counted once."
	outboxPublishedHelp      = "Rows seen becoming published (published_at set) since the exporter started."
	outboxPublishedLateHelp  = "Of the rows seen becoming published, those published after their deadline."
	outboxPublishLatencyHelp = "published_at - created_at of the rows seen becoming published, in seconds."
	outboxCappedHelp         = "1 when a count of this outbox exceeded max_count at the last collection: the counts are then lower bounds per label set and state, never 0 where a row exists (claimed rows and unknown results exact up to max_count; pending and dead rows up to max_count divided among the label sets), and the oldest ages stay exact (but for one logged case, see the oldest age). It keeps a collection cheap during a huge backlog."
	outboxUnclassifiedHelp   = "Rows whose status is NULL or listed in no state of the configuration: counted nowhere else. A lower bound while outbox_events_capped is 1."

	outboxLeaseExpDesc = prometheus.NewDesc(vocab.OutboxLeaseExpirations, outboxLeaseExpHelp, []string{vocab.LabelOutbox}, nil)
	outboxLatencyDesc  = prometheus.NewDesc(vocab.OutboxPublishLatency, outboxPublishLatencyHelp, []string{vocab.LabelOutbox}, nil)
	outboxCappedDesc   = prometheus.NewDesc(vocab.OutboxEventsCapped, outboxCappedHelp, []string{vocab.LabelOutbox}, nil)
	// outboxDescribe are sent by Describe: the label-carrying metrics
	// with the fixed labels only, so that a registry knows every name.
	outboxDescribe = []*prometheus.Desc{
		outboxLeaseExpDesc, outboxLatencyDesc, outboxCappedDesc,
		prometheus.NewDesc(vocab.OutboxEvents, outboxEventsHelp, []string{vocab.LabelOutbox, vocab.LabelState}, nil),
		prometheus.NewDesc(vocab.OutboxOldestPendingAge, outboxOldestHelp, []string{vocab.LabelOutbox}, nil),
		prometheus.NewDesc(vocab.OutboxDeadline, outboxDeadlineHelp, []string{vocab.LabelOutbox}, nil),
		prometheus.NewDesc(vocab.OutboxPastDeadline, outboxPastDeadlineHelp, []string{vocab.LabelOutbox}, nil),
		prometheus.NewDesc(vocab.OutboxRetried, outboxRetriedHelp, []string{vocab.LabelOutbox}, nil),
		prometheus.NewDesc(vocab.OutboxUnknownResult, outboxUnknownHelp, []string{vocab.LabelOutbox}, nil),
		prometheus.NewDesc(vocab.OutboxPublished, outboxPublishedHelp, []string{vocab.LabelOutbox}, nil),
		prometheus.NewDesc(vocab.OutboxPublishedLate, outboxPublishedLateHelp, []string{vocab.LabelOutbox}, nil),
		prometheus.NewDesc(vocab.OutboxUnclassified, outboxUnclassifiedHelp, []string{vocab.LabelOutbox}, nil),
	}
)

// outboxDescs are the descriptors whose labels include an outbox's label
// columns.
type outboxDescs struct {
	events, oldest, deadline, pastDeadline, retried, unknown, published, late, unclassified *prometheus.Desc
}

func newOutboxDescs(labels []string) outboxDescs {
	l := append([]string{vocab.LabelOutbox}, labels...)
	ls := append([]string{vocab.LabelOutbox, vocab.LabelState}, labels...)
	return outboxDescs{
		events:       prometheus.NewDesc(vocab.OutboxEvents, outboxEventsHelp, ls, nil),
		oldest:       prometheus.NewDesc(vocab.OutboxOldestPendingAge, outboxOldestHelp, l, nil),
		deadline:     prometheus.NewDesc(vocab.OutboxDeadline, outboxDeadlineHelp, l, nil),
		pastDeadline: prometheus.NewDesc(vocab.OutboxPastDeadline, outboxPastDeadlineHelp, l, nil),
		retried:      prometheus.NewDesc(vocab.OutboxRetried, outboxRetriedHelp, l, nil),
		unknown:      prometheus.NewDesc(vocab.OutboxUnknownResult, outboxUnknownHelp, l, nil),
		published:    prometheus.NewDesc(vocab.OutboxPublished, outboxPublishedHelp, l, nil),
		late:         prometheus.NewDesc(vocab.OutboxPublishedLate, outboxPublishedLateHelp, l, nil),
		unclassified: prometheus.NewDesc(vocab.OutboxUnclassified, outboxUnclassifiedHelp, l, nil),
	}
}

// Collector collects one outbox table: its rows by state, the age of the
// oldest, deadlines, retries, unknown results, expired leases and the
// rows published since the exporter started.
type Collector struct {
	name    string
	o       *config.Outbox
	pool    *pgxpool.Pool
	logger  *slog.Logger
	sampler *Sampler
	descs   outboxDescs
	order   orderDescs
	// confirmed is set for an outbox published by a replication slot
	// (behind.go).
	confirmed ConfirmedSource
}

// NewCollector returns the collector of outbox name, reading through pool
// (from pg.Open, so that its sessions are read-only). It keeps the
// counters' state between scrapes: make one per outbox for the process's
// life, not one per scrape.
func NewCollector(name string, o *config.Outbox, pool *pgxpool.Pool, logger *slog.Logger) *Collector {
	labels := make([]string, len(o.Labels))
	for i, l := range o.Labels {
		labels[i] = l.Name
	}
	return &Collector{name: name, o: o, pool: pool, logger: logger,
		sampler: NewSampler(name, o), descs: newOutboxDescs(labels), order: newOrderDescs(o)}
}

// KeepState makes c continue prev's counters, watermarks and lease memory
// (a reload) when both sample the same outbox with the same
// configuration, whatever became of its databases entry: they belong to
// the outbox, not to the pool (a new DSN after a failover reads the same
// rows). It reports whether it did. A changed outbox starts fresh: its
// rows, states or labels may mean something else now.
func (c *Collector) KeepState(prev *Collector) bool {
	if prev == nil || prev.name != c.name || !reflect.DeepEqual(prev.o, c.o) || prev.sampler.behind != c.sampler.behind {
		return false
	}
	c.sampler = prev.sampler
	return true
}

// PublishedBySlot makes c collect an outbox that a connector publishes
// from a replication slot and that keeps its rows: its pending rows are
// those committed after the time src says the slot has confirmed, with a
// created_at at most lookback before it (behind.go). A collection fails
// when src does. Call it before KeepState and the first collection.
func (c *Collector) PublishedBySlot(src ConfirmedSource, lookback time.Duration) {
	c.confirmed = src
	c.sampler.PublishedBySlot(lookback)
}

// Name implements Collector.
func (c *Collector) Name() string { return "outbox" }

// Target implements Collector.
func (c *Collector) Target() string { return c.name }

// Describe implements Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range outboxDescribe {
		ch <- d
	}
}

// Update implements Collector. The queries run under ctx, so they are
// cancelled at the scrape's deadline even if the table is locked.
func (c *Collector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	snap, err := c.sample(ctx)
	if err != nil {
		return err
	}
	c.logBound(snap)
	d := c.descs
	// Never panic on a value read from the table: the sampler makes label
	// values valid UTF-8, and a metric that still cannot be built fails
	// the collection instead.
	var bad error
	send := func(desc *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		m, err := prometheus.NewConstMetric(desc, t, v, labels...)
		if err != nil {
			if bad == nil {
				bad = fmt.Errorf("outbox %q: build %s: %w", c.name, desc, err)
			}
			return
		}
		ch <- m
	}
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		send(desc, prometheus.GaugeValue, v, labels...)
	}
	counter := func(desc *prometheus.Desc, v float64, labels ...string) {
		send(desc, prometheus.CounterValue, v, labels...)
	}
	for _, s := range snap.Series {
		vals := collectors.CutLabels(slices.Clone(s.Labels), labelLength(c.o))
		l := append([]string{c.name}, vals...)
		for i, st := range GaugeStates {
			gauge(d.events, s.Events[i], append([]string{c.name, st.String()}, vals...)...)
		}
		// Without a creation time no age is known: no series at all
		// rather than a 0 that reads as healthy.
		if !c.o.NoCreatedAt() {
			gauge(d.oldest, s.OldestAge, l...)
			gauge(d.deadline, s.Deadline, l...)
			gauge(d.pastDeadline, s.PastDeadline, l...)
		}
		gauge(d.retried, s.Retried, l...)
		gauge(d.unknown, s.Unknown, l...)
		if c.o.Style() == config.StyleStatus {
			gauge(d.unclassified, s.Unclassified, l...)
		}
		if c.o.PublishedAt != "" {
			counter(d.published, float64(s.Published), l...)
			if !c.o.NoCreatedAt() {
				counter(d.late, float64(s.PublishedLate), l...)
			}
		}
		c.sendOrder(gauge, counter, s, l)
	}
	capped := 0.0
	if snap.Capped {
		capped = 1
	}
	gauge(outboxCappedDesc, capped, c.name)
	if c.o.LeaseUntil != "" || c.o.ClaimedAt != "" && c.o.LeaseTTL > 0 {
		counter(outboxLeaseExpDesc, float64(snap.LeaseExpirations), c.name)
	}
	if c.o.PublishedAt != "" && !c.o.NoCreatedAt() {
		h, err := prometheus.NewConstHistogram(outboxLatencyDesc, snap.LatencyCount, snap.LatencySum,
			snap.LatencyBuckets, c.name)
		if err != nil && bad == nil {
			bad = fmt.Errorf("outbox %q: build %s: %w", c.name, outboxLatencyDesc, err)
		} else if err == nil {
			ch <- h
		}
	}
	return bad
}

func (c *Collector) sample(ctx context.Context) (*Snapshot, error) {
	if c.confirmed == nil {
		return c.sampler.Sample(ctx, c.pool)
	}
	at, err := c.confirmed(ctx)
	if err != nil {
		return nil, fmt.Errorf("outbox %q is published by a replication slot whose confirmed time is unknown: %w", c.name, err)
	}
	return c.sampler.SampleBehind(ctx, c.pool, at)
}

// labelLength is the longest label value the outbox shows, in bytes
// (max_label_length); longer values are cut with a marker
// (collectors.CutLabel) in metrics, the page and the API.
func labelLength(o *config.Outbox) int {
	if o.MaxLabelLength > 0 {
		return o.MaxLabelLength
	}
	return config.DefaultMaxLabelLength
}

// logBound says, once each time it changes, that some series' oldest age
// is a lower bound: the read of series kept from earlier scrapes that no
// read found a row of stopped at its share of max_count index entries.
// It names the first few (their values cut as on the page).
func (c *Collector) logBound(snap *Snapshot) {
	switch {
	case !snap.BoundChanged:
	case len(snap.LowerBound) > 0:
		var names []string
		for _, l := range snap.LowerBound[:min(len(snap.LowerBound), 3)] {
			names = append(names, "{"+strings.Join(collectors.CutLabels(slices.Clone(l), labelLength(c.o)), ",")+"}")
		}
		c.logger.Warn("oldest age is only a lower bound for some series holding other: the read of the series no other read found a row of stopped at its share of max_count index entries, with entries left (outbox_events_capped is 1)",
			"outbox", c.name, "series", len(snap.LowerBound), "first", strings.Join(names, " "))
	default:
		c.logger.Info("oldest ages exact again for every series", "outbox", c.name)
	}
}
