package outbox

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// Sampler samples one outbox and keeps what its counters need between
// samples: the published watermark, the expired leases already counted,
// the live leases to judge at the next sample, the label values admitted
// under max_label_values. A reload hands it to the new collector when the
// outbox's configuration did not change, so nothing restarts.
type Sampler struct {
	name string
	o    *config.Outbox
	sem  chan struct{}

	spec   *boundSpec
	cap    *SeriesCap
	tuples map[string]*tupleState
	wm     Watermark
	leaseW Watermark
	leases uint64
	live   liveLeases
	hist   Histogram
	order  orderState // order_track.go
	// behind is the lookback of an outbox published by a replication
	// slot (behind.go), 0 for any other: its samples need the slot's
	// confirmed time.
	behind time.Duration
	// ahead are the follow-up reads of the last sample, which this one
	// sends in its first batch (ahead.go).
	ahead []aheadRead
	// groups is how many groups the last sample read in all (the state
	// query's up to max_count+1, and the capped reads'): this one
	// allocates as many at once for the state query's, which the capped
	// reads' join.
	groups int
	// lowerBound: some series' oldest age was a lower bound at the last
	// sample (otherbound.go), logged only when that changes.
	lowerBound bool
	// walk: how far the walks of the series holding "other" no read
	// found have proven them empty (otherwalk.go).
	walk *otherWalk
}

// NewSampler returns a sampler of outbox name.
func NewSampler(name string, o *config.Outbox) *Sampler {
	return &Sampler{name: name, o: o, sem: make(chan struct{}, 1), tuples: map[string]*tupleState{},
		hist: Histogram{Bounds: LatencyBuckets},
		cap:  NewSeriesCap(len(o.Labels), o.MaxLabelValues, slices.Sorted(maps.Keys(o.Deadlines)))}
}

// Fold returns the series label values that rows with label values vals
// count under, as the last sample admitted them. The oracle test judges
// every series by it.
func (s *Sampler) Fold(vals []string) []string { return s.cap.Fold(vals) }

// Sample runs the outbox's queries (sessions of pool are read-only) and
// returns the snapshot. It returns by ctx's deadline (pgx cancels the
// running query). A failed sample changes none of the sampler's state.
func (s *Sampler) Sample(ctx context.Context, pool *pgxpool.Pool) (*Snapshot, error) {
	if s.behind > 0 {
		return nil, fmt.Errorf("sample outbox %q: it is published by a replication slot: sample it with the slot's confirmed time (SampleBehind)", s.name)
	}
	return s.sample(ctx, pool, nil)
}

// PublishedBySlot makes s sample an outbox published by a replication
// slot: its unpublished rows are those committed after the slot's
// confirmed time, with a created_at at most lookback before it. Call it
// before the first sample.
func (s *Sampler) PublishedBySlot(lookback time.Duration) {
	s.behind = lookback
	s.spec, s.ahead = nil, nil
}

// SampleBehind is Sample for an outbox published by a replication slot
// (PublishedBySlot), whose slot has confirmed c.
func (s *Sampler) SampleBehind(ctx context.Context, pool *pgxpool.Pool, c Confirmed) (*Snapshot, error) {
	if s.behind <= 0 {
		return nil, fmt.Errorf("sample outbox %q: it is not published by a replication slot", s.name)
	}
	return s.sample(ctx, pool, &c)
}

func (s *Sampler) sample(ctx context.Context, pool *pgxpool.Pool, c *Confirmed) (*Snapshot, error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("sample outbox %q: wait for the previous sample: %w", s.name, ctx.Err())
	}
	defer func() { <-s.sem }()
	r, err := s.fetch(ctx, pool, c)
	if err != nil {
		// Introspect again next time: the table may have been dropped and
		// created anew, with other column types.
		s.spec = nil
		// The reads sent ahead are built for the table as it was read,
		// and the walks' positions are rows of it.
		s.ahead, s.walk = nil, nil
		return nil, fmt.Errorf("sample outbox %q (table %s): %w", s.name, s.o.Table, err)
	}
	s.ahead, s.groups = r.sent, len(r.groups)
	return s.apply(r), nil
}

// fetch sends the queries as one batch in one read-only transaction: one
// round trip, and every query sees the same now(). The capped reads
// follow in more batches of the same transaction, only when a count
// passed max_count; while the outbox stays capped, those of the last
// sample go ahead in the first batch (ahead.go), so that usually none
// follows. The batch goes in the database's next round
// (pg.Rounds), with the batches of its other outboxes waiting then, in
// their transaction.
func (s *Sampler) fetch(ctx context.Context, pool *pgxpool.Pool, c *Confirmed) (*read, error) {
	spec := s.spec
	var r *read
	j := pg.Job{
		Before: func(ctx context.Context, conn *pgx.Conn) error {
			if spec != nil {
				return nil
			}
			return pg.ReadOnly(ctx, conn, func(tx pgx.Tx) error {
				var err error
				spec, err = openSpec(ctx, tx, s.name, s.o, s.behind)
				return err
			})
		},
		Queue: func() (*pgx.Batch, func(pgx.Tx) error) {
			r = &read{}
			return s.firstBatch(spec, r, c), func(tx pgx.Tx) error { return s.followUps(ctx, tx, spec, r) }
		},
	}
	if outboxsql.OrderEnabled(s.o) {
		// Only then has it more to read after the transaction.
		j.After = func(ctx context.Context, conn *pgx.Conn) error { return s.fetchOrder(ctx, conn, spec, r) }
	}
	if err := pg.RoundsOf(pool).Run(ctx, j); err != nil {
		return nil, err
	}
	s.spec = spec
	return r, nil
}

// followUps sends, in the transaction of the first batch, the reads that
// depend on its answers.
func (s *Sampler) followUps(ctx context.Context, tx pgx.Tx, spec *boundSpec, r *read) error {
	// Only the leases live at the last sample that expired since and
	// are neither live nor read expired now need their rows looked up:
	// usually none, so usually no round trip.
	if ids := s.live.toJudge(r.now, r.live, r.leases); len(ids) > 0 {
		b := &pgx.Batch{}
		b.Queue(spec.LeaseFateQuery(), ids).Query(func(rows pgx.Rows) (err error) {
			if r.fates, err = scanFates(rows); err != nil {
				return fmt.Errorf("look up the rows of the last live leases: %w", err)
			}
			return nil
		})
		if err := pg.SendBatch(ctx, tx, b); err != nil {
			return err
		}
	}
	b, capped := s.cappedBatch(spec, r)
	r.capped = capped
	if b.Len() > 0 {
		if err := pg.SendBatch(ctx, tx, b); err != nil {
			return err
		}
	}
	if b := s.claimedCappedBatch(spec, r); b != nil && b.Len() > 0 {
		if err := pg.SendBatch(ctx, tx, b); err != nil {
			return err
		}
	}
	return s.cover(ctx, tx, spec, r)
}

// firstBatch queues the queries of every sample; c is the confirmed time
// of the slot publishing the outbox, nil for an outbox published by a
// relay.
func (s *Sampler) firstBatch(spec *boundSpec, r *read, c *Confirmed) *pgx.Batch {
	nl := len(s.o.Labels)
	b := &pgx.Batch{}
	if c != nil {
		queueConfirmed(b, *c)
	}
	b.Queue(outboxsql.NowQuery).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&r.now); err != nil {
			return fmt.Errorf("read now: %w", err)
		}
		return nil
	})
	queueSized(b, spec.StateQuery(), spec, partAll, &r.groups, "count unpublished rows", s.groups, nil)
	if q := spec.DeadQuery(); q != "" {
		queueCounts(b, q, nl, &r.dead, "count dead rows")
	}
	if q := spec.UnclassifiedQuery(); q != "" {
		queueCounts(b, q, nl, &r.unclassified, "count unclassified rows")
	}
	if q := spec.LeaseQuery(); q != "" {
		var from any
		if s.leaseW.Started() {
			from = s.leaseW.From(0)
		}
		b.Queue(q, from).Query(func(rows pgx.Rows) (err error) {
			if r.leases, err = scanLeases(rows); err != nil {
				return fmt.Errorf("read expired leases: %w", err)
			}
			return nil
		})
		b.Queue(spec.LiveLeaseQuery()).Query(func(rows pgx.Rows) (err error) {
			if r.live, err = scanLive(rows); err != nil {
				return fmt.Errorf("read live leases: %w", err)
			}
			return nil
		})
	}
	if q := spec.PublishedQuery(); q != "" {
		// The lower bound is computed in SQL from the same now() as the
		// other queries, on the first sample; afterwards from the
		// watermark.
		var from any
		if s.wm.Started() {
			from = s.wm.From(0)
		}
		b.Queue(q, from).Query(func(rows pgx.Rows) (err error) {
			if r.published, err = scanPublished(rows, nl); err != nil {
				return fmt.Errorf("read published rows: %w", err)
			}
			return nil
		})
	}
	s.queueOrder(b, spec, r)
	s.queueAhead(b, spec, r)
	return b
}

// cappedBatch queues the capped reads when the first batch found more
// than max_count unpublished or dead rows, and reports whether a count
// was cut. While capped, the state query's groups are replaced by the
// capped reads'.
func (s *Sampler) cappedBatch(spec *boundSpec, r *read) (*pgx.Batch, bool) {
	nl := len(s.o.Labels)
	max := int64(s.o.MaxCount)
	stateCapped, deadCapped, unclCapped := total(r.groups) > max, total(r.dead) > max, total(r.unclassified) > max
	b := &pgx.Batch{}
	if !stateCapped && !deadCapped && !unclCapped {
		return b, false
	}
	if stateCapped {
		// The state query read the oldest rows by time: a walk.
		r.walked = true
		for i := range r.groups {
			r.groups[i].part = partWalk
		}
		if q := spec.OverridesQuery(); q != "" {
			r.follow(b, aheadRead{sql: q}, spec, partOverride, &r.groups, "read the rows of the deadline overrides (capped)")
		}
		if q := spec.ClaimedCountQuery(); q != "" {
			// Counted before grouped: while more than max_count are
			// claimed their groups are never used (claimedCappedBatch).
			r.followCount(b, q)
		}
		if q := spec.UnknownQuery(); q != "" {
			r.follow(b, aheadRead{sql: q}, spec, partUnknown, &r.groups, "count unknown results (capped)")
		}
	}
	if q := spec.DeadCappedQuery(); deadCapped && q != "" {
		r.dead = nil
		queueCounts(b, q, nl, &r.dead, "count dead rows (capped)")
	}
	if q := spec.UnclassifiedCappedQuery(); unclCapped && q != "" {
		r.unclassified = nil
		queueCounts(b, q, nl, &r.unclassified, "count unclassified rows (capped)")
	}
	return b, true
}

// overCap reports whether more than max_count rows were read by part p
// of the first batch.
func overCap(s *boundSpec, r *read, p part) bool {
	var n int64
	for _, g := range r.groups {
		if g.part == p {
			n += g.rows
		}
	}
	return n > int64(s.O.MaxCount)
}

// claimedCappedBatch reads the claimed rows while the unpublished ones
// are capped: their groups (ClaimedQuery) when at most max_count are
// claimed, else the walks of their parts (claimedcover.go completes
// them); and it replaces the unclaimed unknown results by
// UnknownCappedQuery's when more than max_count have one. nil or empty
// when there is nothing to read (or it was all read ahead).
func (s *Sampler) claimedCappedBatch(spec *boundSpec, r *read) *pgx.Batch {
	claimed, unknown := r.claimedCount > int64(s.o.MaxCount), overCap(spec, r, partUnknown)
	b := &pgx.Batch{}
	if q := spec.ClaimedQuery(); q != "" && r.claimedCount > 0 && !claimed {
		queueGroups(b, q, spec, partClaimed, &r.groups, "count claimed rows (capped)")
	}
	if !claimed && !unknown {
		if b.Len() == 0 {
			return nil
		}
		return b
	}
	if unknown {
		kept := r.groups[:0:0]
		for _, g := range r.groups {
			if g.part != partUnknown {
				kept = append(kept, g)
			}
		}
		r.groups = kept
	}
	if claimed {
		queueClaimedWalks(b, spec, r)
	}
	if unknown {
		queueGroups(b, spec.UnknownCappedQuery(), spec, partUnknown, &r.groups, "count unknown results (capped)")
	}
	return b
}

func total(gs []group) int64 {
	var n int64
	for _, g := range gs {
		n += g.rows
	}
	return n
}

// boundSpec is an outbox's queries built for its table's columns, with
// the rules that decide a row's state from what they read: both depend
// on the column types (an integer status is read in canonical form).
type boundSpec struct {
	*outboxsql.Spec
	Rules *Rules
}

// openSpec reads the columns of outbox name's table and builds its
// queries and rules; behind is the lookback of an outbox published by a
// replication slot, 0 for any other.
func openSpec(ctx context.Context, q outboxsql.Querier, name string, o *config.Outbox, behind time.Duration) (*boundSpec, error) {
	cols, err := outboxsql.IntrospectOutbox(ctx, q, o)
	if err != nil {
		return nil, err
	}
	spec, err := outboxsql.NewSpec(name, o, cols)
	if err != nil {
		return nil, err
	}
	spec.Behind = behind
	// spec.O is o as the table reads it: a preset's schema generation,
	// the NULL status and boolean values applied.
	rules, err := NewRules(spec.O, spec.IntStatus)
	if err != nil {
		return nil, fmt.Errorf("outbox %q: %w", name, err)
	}
	return &boundSpec{Spec: spec, Rules: rules}, nil
}
