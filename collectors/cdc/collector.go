package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

var (
	lagBytesDesc = prometheus.NewDesc(vocab.CDCSlotLagBytes,
		"WAL bytes between the server's current (insert) position and the slot's confirmed_flush_lsn: changes the connector has not confirmed.",
		[]string{vocab.LabelCDC}, nil)
	lagSecondsDesc = prometheus.NewDesc(vocab.CDCSlotLagSeconds,
		"How long ago the server's WAL position was where the slot's confirmed_flush_lsn is now: the age of the oldest change the connector has not confirmed; 0 when caught up. While outbox_cdc_slot_lag_lower_bound and outbox_cdc_slot_lag_upper_bound are both 0 it is never less than the truth and at most one collection interval more.",
		[]string{vocab.LabelCDC}, nil)
	lagAtLeastDesc = prometheus.NewDesc(vocab.CDCSlotLagAtLeastSeconds,
		"The least the slot's lag can be in seconds: never over the truth; with outbox_cdc_slot_lag_seconds it brackets the truth (equal to it while outbox_cdc_slot_lag_lower_bound is 1, 0 when caught up).",
		[]string{vocab.LabelCDC}, nil)
	lowerBoundDesc = prometheus.NewDesc(vocab.CDCSlotLagLowerBound,
		"1 when the slot's confirmed position is older than the exporter's WAL history and no commit time below the slot's catalog_xmin is kept (track_commit_timestamp off): outbox_cdc_slot_lag_seconds may be under the truth, and the linked outbox's pending rows a subset of the true ones.",
		[]string{vocab.LabelCDC}, nil)
	upperBoundDesc = prometheus.NewDesc(vocab.CDCSlotLagUpperBound,
		"1 when outbox_cdc_slot_lag_seconds is never under the truth but may be over it by more than one collection interval: after an exporter start the slot's confirmed position lies between the last checkpoint and the first collection, or it is older than the exporter's WAL history and is dated by the latest commit below the slot's catalog_xmin. The linked outbox's pending rows and their oldest age are then upper bounds too (a superset of the true rows); outbox_cdc_slot_lag_at_least_seconds is the other side.",
		[]string{vocab.LabelCDC}, nil)
	activeDesc = prometheus.NewDesc(vocab.CDCSlotActive,
		"1 while a connector holds the slot; 0 when nothing streams from it and changes pile up.",
		[]string{vocab.LabelCDC}, nil)
	walStatusDesc = prometheus.NewDesc(vocab.CDCSlotWALStatus,
		"1 for the slot's wal_status: reserved, extended (past max_wal_size, still kept), unreserved (WAL may be removed at the next checkpoint) or lost (the WAL the slot needs is gone: the connector can never resume and the events in it are lost to it).",
		[]string{vocab.LabelCDC, "status"}, nil)
	safeWALDesc = prometheus.NewDesc(vocab.CDCSlotSafeWALSize,
		"WAL bytes that can still be written before the slot is lost (pg_replication_slots.safe_wal_size); absent when max_slot_wal_keep_size is unlimited.",
		[]string{vocab.LabelCDC}, nil)
	missingDesc = prometheus.NewDesc(vocab.CDCSlotMissing,
		"1 when the configured replication slot does not exist on the database (dropped, or never created by the connector) or is not a logical slot: nothing confirms the outbox's events and its other cdc series are absent; 0 when the slot is there.",
		[]string{vocab.LabelCDC}, nil)
	deadlineDesc = prometheus.NewDesc(vocab.CDCDeadline,
		"The configured deadline of the slot's lag in seconds.",
		[]string{vocab.LabelCDC}, nil)
)

// watched is one cdc entry of the configuration.
type watched struct {
	cdc      string
	slot     string
	deadline time.Duration
	// The metrics whose values can only be these are built once: a
	// collection builds only the ones that carry a measurement.
	deadlineMetric prometheus.Metric
	missing        [2]prometheus.Metric   // 0 and 1
	status         [][2]prometheus.Metric // by WALStatuses index, then 0 or 1
}

// HistoryMinGap is how far apart a collector's history keeps its samples:
// a collection closer than this to the sample before the newest replaces
// the newest (History).
const HistoryMinGap = time.Second

// Collector watches the slots of one configured database. All its slots
// are read in one statement, and one History of the server's WAL position
// serves them all: the position is the server's, not a slot's.
type Collector struct {
	database string
	db       pg.Beginner
	watched  []watched
	names    []string
	hist     *History
	logger   *slog.Logger

	mu   sync.Mutex
	last map[string]SlotState
	// bounds holds each cdc entry's last commit time below its slot's
	// catalog_xmin.
	bounds map[string]commitBound
	// failed holds why the last collection has no state of a cdc entry.
	failed map[string]error
	// ready is closed when the first collection has finished: what an
	// outbox published by a slot waits for (State).
	ready     chan struct{}
	readyOnce sync.Once
}

// NewCollector returns the collector of the cdc entries on database. It
// does not connect until the first Update.
func NewCollector(database string, entries map[string]*config.CDC, db pg.Beginner, logger *slog.Logger) *Collector {
	c := &Collector{database: database, db: db, logger: logger, last: map[string]SlotState{},
		failed: map[string]error{}, ready: make(chan struct{}), bounds: map[string]commitBound{},
		hist: NewHistory(DefaultHistorySize, HistoryMinGap)}
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		e := entries[name]
		w := watched{cdc: name, slot: e.Slot, deadline: e.Deadline,
			deadlineMetric: prometheus.MustNewConstMetric(deadlineDesc, prometheus.GaugeValue, e.Deadline.Seconds(), name),
			missing: [2]prometheus.Metric{prometheus.MustNewConstMetric(missingDesc, prometheus.GaugeValue, 0, name),
				prometheus.MustNewConstMetric(missingDesc, prometheus.GaugeValue, 1, name)}}
		for _, st := range WALStatuses {
			w.status = append(w.status, [2]prometheus.Metric{
				prometheus.MustNewConstMetric(walStatusDesc, prometheus.GaugeValue, 0, name, st),
				prometheus.MustNewConstMetric(walStatusDesc, prometheus.GaugeValue, 1, name, st),
			})
		}
		c.watched = append(c.watched, w)
		c.names = append(c.names, e.Slot)
	}
	return c
}

// ByDatabase groups the cdc section by database, for one Collector each.
func ByDatabase(cfg map[string]*config.CDC) map[string]map[string]*config.CDC {
	out := map[string]map[string]*config.CDC{}
	for name, e := range cfg {
		if out[e.Database] == nil {
			out[e.Database] = map[string]*config.CDC{}
		}
		out[e.Database][name] = e
	}
	return out
}

// Name implements collectors.Collector.
func (c *Collector) Name() string { return "cdc" }

// Target implements collectors.Collector: the database the slots are on.
func (c *Collector) Target() string { return c.database }

// History returns the collector's record of the server's WAL position.
func (c *Collector) History() *History { return c.hist }

// Describe implements collectors.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{lagBytesDesc, lagSecondsDesc, lagAtLeastDesc, lowerBoundDesc, upperBoundDesc, activeDesc, walStatusDesc, safeWALDesc, missingDesc, deadlineDesc} {
		ch <- d
	}
}

// Update implements collectors.Collector. A slot that is missing or not
// logical fails the collection after the other slots' metrics are sent.
func (c *Collector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	defer c.readyOnce.Do(func() { close(c.ready) })
	for _, w := range c.watched {
		ch <- w.deadlineMetric
	}
	r, err := ReadSlots(ctx, c.db, c.names)
	if err != nil {
		err = fmt.Errorf("cdc on database %q: %w", c.database, err)
		// No state is better than the last one: an outbox behind a slot
		// must not be judged by a position that may be long gone.
		failed := map[string]error{}
		for _, w := range c.watched {
			failed[w.cdc] = err
		}
		c.mu.Lock()
		c.last, c.failed = map[string]SlotState{}, failed
		c.mu.Unlock()
		return err
	}
	c.hist.Add(r.Now.At, r.Now.LSN)
	if c.hist.Len() == 1 {
		// Just started, or the server was replaced: the last checkpoint
		// is the only older observation there is. Without it a slot far
		// behind would read 0 seconds at the first collection.
		if cp, err := ReadCheckpoint(ctx, c.db); err != nil {
			c.logger.Debug("no checkpoint to seed the WAL history; lag seconds start from the first collection", "database", c.database, "err", err)
		} else {
			c.hist.SeedRange(cp.Before, cp.Reached, cp.Redo)
		}
	}
	var errs []error
	states, failed := map[string]SlotState{}, map[string]error{}
	for i, w := range c.watched {
		// A slot that is gone says so in a series of its own, rather
		// than by its other series vanishing.
		ch <- w.missing[b2i(!r.Slots[i].Exists || r.Slots[i].Type != "logical" || r.Slots[i].ConfirmedFlush == nil)]
		st, err := Assess(r.Now, r.Slots[i], c.hist, nil)
		if err == nil && st.LowerBound {
			if before, ok := c.committedBefore(ctx, w.cdc, r.Slots[i], r.CommitTimes); ok {
				st, err = Assess(r.Now, r.Slots[i], c.hist, &before)
			}
		}
		if err != nil {
			err = fmt.Errorf("cdc %q: %w", w.cdc, err)
			errs = append(errs, err)
			failed[w.cdc] = err
			continue
		}
		states[w.cdc] = st
		send(ch, w, st)
	}
	c.mu.Lock()
	c.last, c.failed = states, failed
	c.mu.Unlock()
	return errors.Join(errs...)
}

func send(ch chan<- prometheus.Metric, w watched, st SlotState) {
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, w.cdc)
	}
	gauge(lagBytesDesc, st.LagBytes)
	gauge(lagSecondsDesc, st.LagSeconds)
	gauge(lagAtLeastDesc, st.LagAtLeast)
	gauge(lowerBoundDesc, b2f(st.LowerBound))
	gauge(upperBoundDesc, b2f(st.UpperBound))
	gauge(activeDesc, b2f(st.Active))
	for i, s := range WALStatuses {
		if st.WALStatus == s {
			ch <- w.status[i][1]
		} else {
			ch <- w.status[i][0]
		}
	}
	if st.SafeWALSize != nil {
		gauge(safeWALDesc, float64(*st.SafeWALSize))
	}
}

// committedBefore is the latest commit time below the slot's catalog_xmin
// (CommittedBefore), read again only when catalog_xmin moved. ok is false
// when there is none: commit times are not kept, the slot reports no
// catalog_xmin, or the read failed (logged; the lag stays a marked lower
// bound).
func (c *Collector) committedBefore(ctx context.Context, cdc string, s SlotRow, commitTimes bool) (time.Time, bool) {
	if !commitTimes || s.CatalogXmin == nil {
		return time.Time{}, false
	}
	c.mu.Lock()
	b, seen := c.bounds[cdc]
	c.mu.Unlock()
	if seen && b.xmin == *s.CatalogXmin {
		return b.at, b.ok
	}
	at, ok, err := CommittedBefore(ctx, c.db, *s.CatalogXmin, CommitWindow)
	if err != nil {
		c.logger.Warn("no commit time dates the slot's position; its lag stays a lower bound", "database", c.database, "cdc", cdc, "err", err)
		return time.Time{}, false
	}
	c.mu.Lock()
	c.bounds[cdc] = commitBound{xmin: *s.CatalogXmin, at: at, ok: ok}
	c.mu.Unlock()
	return at, ok
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Last returns the state of a cdc entry's slot at the last collection
// that read it.
func (c *Collector) Last(cdc string) (SlotState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.last[cdc]
	return st, ok
}

// State waits, up to ctx's end, for the collector's first collection to
// finish (an outbox published by the slot is collected in the same
// scrape, at the same time), then returns the state of the cdc entry's
// slot at the last collection: this scrape's or the one before, so the
// confirmed time is exact to one collection interval and, when it is
// late, errs towards pending. It fails when that collection could not
// read the slot.
func (c *Collector) State(ctx context.Context, cdc string) (SlotState, error) {
	select {
	case <-c.ready:
	case <-ctx.Done():
		return SlotState{}, fmt.Errorf("cdc %q: wait for the first collection of its slot: %w", cdc, ctx.Err())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.last[cdc]; ok {
		return st, nil
	}
	if err := c.failed[cdc]; err != nil {
		return SlotState{}, err
	}
	return SlotState{}, fmt.Errorf("cdc %q is not watched on database %q", cdc, c.database)
}
