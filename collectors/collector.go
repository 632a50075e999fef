// Package collectors samples the parts of an outbox pipeline and exposes
// them as Prometheus metrics.
//
// Each part is a Collector; an Exporter runs all of them for one scrape,
// each under the scrape's deadline, and adds the exporter's own
// outbox_exporter_collector_* metrics so that a failing part shows as 0
// while the others keep working.
package collectors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// Namespace prefixes every metric.
const Namespace = "outbox"

// Collector samples one part of the pipeline, for one target (an outbox,
// a Kafka cluster, a reconcile job). Update must return by ctx's deadline;
// what it sent before an error is still exported.
type Collector interface {
	// Name is the collector label: "outbox", "kafka", "reconcile", "audit".
	Name() string
	// Target is the target label: the outbox, cluster or job name.
	Target() string
	// Describe sends every descriptor the collector may ever use.
	Describe(ch chan<- *prometheus.Desc)
	// Update sends the current metrics.
	Update(ctx context.Context, ch chan<- prometheus.Metric) error
}

var (
	successDesc = prometheus.NewDesc(
		vocab.CollectorSuccess,
		"1 if the last collection of this collector and target worked, 0 if it failed or timed out.",
		[]string{vocab.LabelCollector, vocab.LabelTarget}, nil)
	durationDesc = prometheus.NewDesc(
		vocab.CollectorDuration,
		"How long the last collection of this collector and target took.",
		[]string{vocab.LabelCollector, vocab.LabelTarget}, nil)
)

// Exporter runs a set of collectors for a scrape. Concurrent scrapes share
// one collection: a scrape that arrives while another is collecting waits
// for that result instead of sending its own queries, so a storm of scrapes
// cannot multiply the load on a monitored database.
type Exporter struct {
	collectors []Collector
	logger     *slog.Logger
	// sizes is how many metrics each collector sent last time: the
	// next collection's slices are made that size instead of growing
	// (6,000 series at 1000 Kafka groups).
	sizes []atomic.Int64

	mu       sync.Mutex
	inflight *collection
}

type collection struct {
	done    chan struct{}
	metrics []prometheus.Metric
}

// NewExporter returns an Exporter over cs.
func NewExporter(logger *slog.Logger, cs ...Collector) *Exporter {
	return &Exporter{collectors: cs, logger: logger, sizes: make([]atomic.Int64, len(cs))}
}

// Collectors returns the collectors the exporter runs.
func (e *Exporter) Collectors() []Collector { return e.collectors }

// Describe implements prometheus.Collector.
func (e *Exporter) Describe(ch chan<- *prometheus.Desc) {
	ch <- successDesc
	ch <- durationDesc
	seen := map[string]bool{}
	for _, c := range e.collectors {
		// Several targets of one collector share descriptors; describe once.
		if seen[c.Name()] {
			continue
		}
		seen[c.Name()] = true
		c.Describe(ch)
	}
}

// Collect runs every collector and returns their metrics. It returns by
// ctx's deadline: a collector still running then is reported as failed,
// and the metrics it already sent are kept.
func (e *Exporter) Collect(ctx context.Context) []prometheus.Metric {
	e.mu.Lock()
	if c := e.inflight; c != nil {
		e.mu.Unlock()
		select {
		case <-c.done:
			return c.metrics
		case <-ctx.Done():
			return e.timedOut()
		}
	}
	c := &collection{done: make(chan struct{})}
	e.inflight = c
	e.mu.Unlock()

	c.metrics = e.collectAll(ctx)
	e.mu.Lock()
	e.inflight = nil
	e.mu.Unlock()
	close(c.done)
	return c.metrics
}

// timedOut reports every collector failed, for a scrape whose deadline
// passed while it waited for a shared collection.
func (e *Exporter) timedOut() []prometheus.Metric {
	var out []prometheus.Metric
	for _, c := range e.collectors {
		out = append(out, prometheus.MustNewConstMetric(successDesc, prometheus.GaugeValue, 0, c.Name(), c.Target()))
	}
	return out
}

// collections numbers the collections of every Exporter: CollectionOf.
var collections atomic.Uint64

type collectionKey struct{}

// CollectionOf returns the number of the collection ctx runs in (one
// Exporter.Collect, shared by its concurrent scrapes), so that collectors
// of several targets can read what they have in common once per
// collection; ok is false outside one.
func CollectionOf(ctx context.Context) (id uint64, ok bool) {
	id, ok = ctx.Value(collectionKey{}).(uint64)
	return id, ok
}

func (e *Exporter) collectAll(ctx context.Context) []prometheus.Metric {
	ctx = context.WithValue(ctx, collectionKey{}, collections.Add(1))
	var (
		mu  sync.Mutex
		out []prometheus.Metric
		wg  sync.WaitGroup
	)
	n := 2 * len(e.collectors)
	for i := range e.sizes {
		n += int(e.sizes[i].Load())
	}
	out = make([]prometheus.Metric, 0, n)
	for i, c := range e.collectors {
		wg.Add(1)
		go func(c Collector) {
			defer wg.Done()
			ms, ok, took := e.run(ctx, c, &e.sizes[i])
			e.logger.Debug("collection finished", "collector", c.Name(), "target", c.Target(), "ok", ok, "duration", took, "metrics", len(ms))
			success := 0.0
			if ok {
				success = 1
			}
			mu.Lock()
			out = append(out, ms...)
			out = append(out,
				prometheus.MustNewConstMetric(successDesc, prometheus.GaugeValue, success, c.Name(), c.Target()),
				prometheus.MustNewConstMetric(durationDesc, prometheus.GaugeValue, took.Seconds(), c.Name(), c.Target()))
			mu.Unlock()
		}(c)
	}
	wg.Wait()
	return out
}

// run calls one collector's Update and gathers what it sends, giving up at
// ctx's deadline even if Update does not return.
func (e *Exporter) run(ctx context.Context, c Collector, size *atomic.Int64) ([]prometheus.Metric, bool, time.Duration) {
	start := time.Now()
	ch := make(chan prometheus.Metric, 64)
	errc := make(chan error, 1)
	go func() {
		defer close(ch)
		defer func() {
			// A bug in one collector (a label it cannot encode, say) must
			// not take the exporter down: it fails that collection only.
			if r := recover(); r != nil {
				errc <- fmt.Errorf("collector %s/%s panicked: %v", c.Name(), c.Target(), r)
			}
		}()
		errc <- c.Update(ctx, ch)
	}()
	ms := make([]prometheus.Metric, 0, size.Load())
	defer func() { size.Store(int64(len(ms))) }()
	for {
		select {
		case m, open := <-ch:
			if !open {
				err := <-errc
				if err != nil {
					e.logger.Error("collector failed", "collector", c.Name(), "target", c.Target(), "err", err)
				}
				return ms, err == nil, time.Since(start)
			}
			ms = append(ms, m)
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				// The scraper went away; nothing timed out.
				e.logger.Debug("scrape abandoned by the client", "collector", c.Name(), "target", c.Target())
			} else {
				e.logger.Error("collector timed out", "collector", c.Name(), "target", c.Target(), "err", ctx.Err())
			}
			// Drain in the background so a late Update does not block.
			go func() {
				for range ch {
				}
			}()
			return ms, false, time.Since(start)
		}
	}
}
