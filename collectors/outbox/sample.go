package outbox

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// Series is what one combination of label values shows in a sample.
type Series struct {
	// Labels are the label values, in the configured label order; values
	// beyond max_label_values are Other.
	Labels []string
	// Events counts rows by state, indexed like GaugeStates.
	Events [4]float64
	// OldestAge is the age in seconds of the oldest unpublished row, 0
	// when none.
	OldestAge float64
	// Deadline is the deadline of these rows in seconds.
	Deadline     float64
	PastDeadline float64
	Retried      float64
	Unknown      float64
	// Published and PublishedLate are cumulative since the sampler started.
	Published     uint64
	PublishedLate uint64
	// OutOfOrder and NoReceipt: order.go, receipt.go.
	OutOfOrder float64
	NoReceipt  uint64
}

// Snapshot is one sample of an outbox.
type Snapshot struct {
	Series []Series
	// Capped is true when a count was cut at max_count: the counts are
	// then lower bounds (the oldest ages stay exact).
	Capped bool
	// LeaseExpirations is cumulative since the sampler started.
	LeaseExpirations uint64
	// Latency is the cumulative publish latency histogram.
	LatencyBuckets map[float64]uint64
	LatencyCount   uint64
	LatencySum     float64
}

// Sampler samples one outbox and keeps what its counters need between
// samples: the published watermark, the expired leases already counted,
// the label values admitted under max_label_values.
type Sampler struct {
	name string
	o    *config.Outbox
	sem  chan struct{}

	spec   *Spec
	caps   []*LabelCap
	tuples map[string]*tupleState
	wm     Watermark
	leaseW Watermark
	leases uint64
	hist   Histogram
	order  orderState // order_track.go
}

type tupleState struct {
	labels          []string
	seen            time.Time
	published, late uint64
	noReceipt       uint64
}

// NewSampler returns a sampler of outbox name.
func NewSampler(name string, o *config.Outbox) *Sampler {
	s := &Sampler{name: name, o: o, sem: make(chan struct{}, 1), tuples: map[string]*tupleState{},
		hist: Histogram{Bounds: LatencyBuckets}}
	for range o.Labels {
		s.caps = append(s.caps, NewLabelCap(o.MaxLabelValues))
	}
	return s
}

type group struct {
	facts  Facts
	labels []string
	rows   int64
	age    float64
	late   int64
}

type oldest struct {
	labels []string
	age    float64
}

// read is what one sample's queries fetched, before any decision.
type read struct {
	now       int64
	groups    []group
	oldest    []oldest
	dead      []group
	leases    []Mark
	published []PublishedRow
	order     orderRead
}

// Sample runs the outbox's queries (sessions of pool are read-only) and
// returns the snapshot. It returns by ctx's deadline (pgx cancels the
// running query). A failed sample changes none of the sampler's state.
func (s *Sampler) Sample(ctx context.Context, pool *pgxpool.Pool) (*Snapshot, error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("sample outbox %q: wait for the previous sample: %w", s.name, ctx.Err())
	}
	defer func() { <-s.sem }()
	r, err := s.fetch(ctx, pool)
	if err != nil {
		// Introspect again next time: the table may have been dropped and
		// created anew, with other column types.
		s.spec = nil
		return nil, fmt.Errorf("sample outbox %q (table %s): %w", s.name, s.o.Table, err)
	}
	return s.apply(r), nil
}

// fetch sends the queries as one batch: one round trip, and one implicit
// transaction, so that every query sees the same now(). The oldest-row
// skip-scan follows only when the state query was capped.
func (s *Sampler) fetch(ctx context.Context, pool *pgxpool.Pool) (*read, error) {
	spec := s.spec
	if spec == nil {
		cols, err := Introspect(ctx, pool, s.o.Table)
		if err != nil {
			return nil, err
		}
		if spec, err = NewSpec(s.name, s.o, cols); err != nil {
			return nil, err
		}
	}
	nl := len(s.o.Labels)
	r := &read{}
	b := &pgx.Batch{}
	b.Queue(NowQuery).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&r.now); err != nil {
			return fmt.Errorf("read now: %w", err)
		}
		return nil
	})
	b.Queue(spec.StateQuery()).Query(func(rows pgx.Rows) (err error) {
		if r.groups, err = scanGroups(rows, nl, spec); err != nil {
			return fmt.Errorf("count unpublished rows: %w", err)
		}
		return nil
	})
	if q := spec.DeadQuery(); q != "" {
		b.Queue(q).Query(func(rows pgx.Rows) (err error) {
			if r.dead, err = scanGroups(rows, nl, nil); err != nil {
				return fmt.Errorf("count dead rows: %w", err)
			}
			return nil
		})
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
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire a connection: %w", err)
	}
	defer conn.Release()
	// Prepared once per connection: the server keeps the plans, so a
	// collection does not pay for planning five queries every scrape.
	// (PostgreSQL replans them itself after DDL or ANALYZE on the table.)
	for _, q := range b.QueuedQueries {
		if _, err := conn.Conn().Prepare(ctx, q.SQL, q.SQL); err != nil {
			return nil, fmt.Errorf("prepare: %w", err)
		}
	}
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	if total(r.groups) > int64(s.o.MaxCount) {
		rows, err := conn.Query(ctx, spec.OldestQuery())
		if err != nil {
			return nil, fmt.Errorf("find oldest unpublished rows: %w", err)
		}
		if r.oldest, err = scanOldest(rows, nl); err != nil {
			return nil, fmt.Errorf("find oldest unpublished rows: %w", err)
		}
	}
	if err := s.fetchOrder(ctx, conn.Conn(), spec, r); err != nil {
		return nil, err
	}
	s.spec = spec
	return r, nil
}

func total(gs []group) int64 {
	var n int64
	for _, g := range gs {
		n += g.rows
	}
	return n
}

// strs turns label values read from the table into label values: NULL
// is "", and invalid UTF-8 (text in a SQL_ASCII database may hold any
// bytes) has each invalid sequence replaced by U+FFFD, so that a metric
// can always be built from it.
func strs(ps []*string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		if p != nil {
			out[i] = strings.ToValidUTF8(*p, "\uFFFD")
		}
	}
	return out
}

// scanGroups reads the state query (with its spec) or the dead query
// (spec nil).
func scanGroups(rows pgx.Rows, nl int, spec *Spec) ([]group, error) {
	defer rows.Close()
	facts := spec != nil
	var nd int
	if facts {
		nd = len(spec.Deadlines())
	}
	var out []group
	for rows.Next() {
		var (
			g      group
			labels = make([]*string, nl)
			age    *float64
			late   = make([]int64, nd)
			status string
			bits   int32
			dest   []any
		)
		if facts {
			dest = append(dest, &status, &bits)
		}
		for i := range labels {
			dest = append(dest, &labels[i])
		}
		dest = append(dest, &g.rows)
		if facts {
			dest = append(dest, &age)
			for i := range late {
				dest = append(dest, &late[i])
			}
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		g.labels = strs(labels)
		if facts {
			g.facts = FactsFromBits(status, bits)
			g.late = late[spec.lateColumn(g.labels)]
		}
		if age != nil && *age > 0 {
			g.age = *age
		}
		if g.rows > 0 {
			out = append(out, g)
		}
	}
	return out, rows.Err()
}

func scanOldest(rows pgx.Rows, nl int) ([]oldest, error) {
	defer rows.Close()
	var out []oldest
	for rows.Next() {
		var (
			labels = make([]*string, nl)
			age    *float64
			dest   []any
		)
		for i := range labels {
			dest = append(dest, &labels[i])
		}
		dest = append(dest, &age)
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		o := oldest{labels: strs(labels)}
		if age != nil && *age > 0 {
			o.age = *age
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

func scanLeases(rows pgx.Rows) ([]Mark, error) {
	defer rows.Close()
	var out []Mark
	for rows.Next() {
		var (
			id     string
			lease  int64
			expiry int64
		)
		if err := rows.Scan(&id, &lease, &expiry); err != nil {
			return nil, err
		}
		// A row claimed again has a new lease, so a new key.
		out = append(out, Mark{Key: id + "\x00" + strconv.FormatInt(lease, 10), At: expiry})
	}
	return out, rows.Err()
}

func scanPublished(rows pgx.Rows, nl int) ([]PublishedRow, error) {
	defer rows.Close()
	var out []PublishedRow
	for rows.Next() {
		var (
			p      PublishedRow
			labels = make([]*string, nl)
			lat    *float64
			dest   = []any{&p.ID}
		)
		for i := range labels {
			dest = append(dest, &labels[i])
		}
		dest = append(dest, &p.PublishedAt, &lat)
		dest = append(dest, publishedExtraDest(rows, nl, &p)...)
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		p.Labels = strs(labels)
		if lat != nil && *lat > 0 {
			p.Latency = *lat
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// apply decides from what fetch read and advances the sampler's state.
func (s *Sampler) apply(r *read) *Snapshot {
	o := s.o
	now := time.UnixMicro(r.now)
	rules := s.spec.Rules
	snap := &Snapshot{}

	marks := make([]Mark, len(r.published))
	for i, p := range r.published {
		marks[i] = Mark{Key: p.ID, At: p.PublishedAt}
	}
	var fresh []PublishedRow
	for _, i := range s.wm.Observe(marks, r.now, len(r.published) >= MaxPublishedRows) {
		fresh = append(fresh, r.published[i])
	}
	s.leases += uint64(len(s.leaseW.Observe(r.leases, r.now, len(r.leases) >= MaxPublishedRows)))
	snap.Capped = total(r.groups) > int64(o.MaxCount) || total(r.dead) > int64(o.MaxCount)

	// Admit label values, per column, ranked by what this sample saw.
	for i, c := range s.caps {
		var cands []Candidate
		for _, g := range r.groups {
			cands = append(cands, Candidate{Value: g.labels[i], Rows: g.rows, OldestAge: g.age})
		}
		for _, g := range r.dead {
			cands = append(cands, Candidate{Value: g.labels[i], Rows: g.rows})
		}
		for _, x := range r.oldest {
			cands = append(cands, Candidate{Value: x.labels[i], OldestAge: x.age})
		}
		for _, p := range fresh {
			cands = append(cands, Candidate{Value: p.Labels[i], Rows: 1})
		}
		c.Admit(cands, now)
	}
	fold := func(vals []string) (string, []string) {
		out := make([]string, len(vals))
		for i, v := range vals {
			out[i] = s.caps[i].Fold(v)
		}
		return strings.Join(out, "\xff"), out
	}
	gauges := map[string]*Series{}
	at := func(vals []string) *Series {
		key, folded := fold(vals)
		g, ok := gauges[key]
		if !ok {
			g = &Series{Labels: folded}
			gauges[key] = g
		}
		return g
	}
	for _, g := range r.groups {
		st := rules.Classify(g.facts)
		if st == Ignored || st == Published {
			continue
		}
		x := at(g.labels)
		x.Events[stateIndex(st)] += float64(g.rows)
		if st == Dead {
			continue
		}
		x.PastDeadline += float64(g.late)
		if g.facts.Attempted {
			x.Retried += float64(g.rows)
		}
		if rules.Unknown(st, g.facts) {
			x.Unknown += float64(g.rows)
		}
		if g.age > x.OldestAge {
			x.OldestAge = g.age
		}
	}
	for _, x := range r.oldest {
		g := at(x.labels)
		if x.age > g.OldestAge {
			g.OldestAge = x.age
		}
	}
	for _, g := range r.dead {
		at(g.labels).Events[stateIndex(Dead)] += float64(g.rows)
	}
	s.applyOrder(r, at)
	for key, g := range gauges {
		s.tuple(key, g.Labels).seen = now
	}
	if len(o.Labels) == 0 {
		s.tuple("", nil).seen = now
	}
	for _, p := range fresh {
		key, folded := fold(p.Labels)
		t := s.tuple(key, folded)
		t.seen = now
		t.published++
		if p.NoReceipt {
			t.noReceipt++
		}
		if Late(time.Duration(p.Latency*float64(time.Second)), Deadline(o, p.Labels)) {
			t.late++
		}
		s.hist.Observe(p.Latency)
	}
	for key, t := range s.tuples {
		if now.Sub(t.seen) > ForgetAfter {
			delete(s.tuples, key)
		}
	}
	keys := make([]string, 0, len(s.tuples))
	for k := range s.tuples {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t := s.tuples[k]
		x := Series{Labels: t.labels}
		if g, ok := gauges[k]; ok {
			x = *g
		}
		x.Published, x.PublishedLate, x.NoReceipt = t.published, t.late, t.noReceipt
		x.Deadline = Deadline(o, t.labels).Seconds()
		snap.Series = append(snap.Series, x)
	}
	if len(snap.Series) == 0 {
		// Nothing seen yet: one series of empty label values, so that the
		// gauges read 0 rather than being absent.
		labels := make([]string, len(o.Labels))
		snap.Series = append(snap.Series, Series{Labels: labels, Deadline: o.Deadline.Seconds()})
	}
	snap.LeaseExpirations = s.leases
	snap.LatencyBuckets = s.hist.Buckets()
	snap.LatencyCount = s.hist.Count
	snap.LatencySum = s.hist.Sum
	return snap
}

func (s *Sampler) tuple(key string, labels []string) *tupleState {
	t, ok := s.tuples[key]
	if !ok {
		if labels == nil {
			labels = []string{}
		}
		t = &tupleState{labels: labels}
		s.tuples[key] = t
	}
	return t
}

func stateIndex(st State) int {
	for i, g := range GaugeStates {
		if g == st {
			return i
		}
	}
	return 0
}
