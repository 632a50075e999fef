package outbox

import (
	"slices"
	"sort"
	"time"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
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
	// Unclassified counts rows with a NULL status or one listed nowhere.
	Unclassified float64
	// Published and PublishedLate are cumulative since the sampler started.
	Published     uint64
	PublishedLate uint64
	// OutOfOrder and NoReceipt: order.go, outboxsql/receipt.go.
	OutOfOrder float64
	NoReceipt  uint64
}

// Snapshot is one sample of an outbox.
type Snapshot struct {
	Series []Series
	// Capped is true when a count was cut at max_count: the counts are
	// then lower bounds (README, "Cost"; the oldest ages stay exact).
	Capped bool
	// LowerBound are the label values of the series whose oldest ages
	// are lower bounds (a bounded read stopped early, otherbound.go);
	// BoundChanged is true when some became or stopped being so at this
	// sample.
	LowerBound   [][]string
	BoundChanged bool
	// LeaseExpirations is cumulative since the sampler started.
	LeaseExpirations uint64
	// Latency is the cumulative publish latency histogram.
	LatencyBuckets map[float64]uint64
	LatencyCount   uint64
	LatencySum     float64
}

type tupleState struct {
	labels          []string
	seen            time.Time
	published, late uint64
	noReceipt       uint64
}

// apply decides from what fetch read and advances the sampler's state.
func (s *Sampler) apply(r *read) *Snapshot {
	o := s.o
	now := time.UnixMicro(r.now)
	snap := &Snapshot{Capped: r.capped, LowerBound: r.lowerBound}
	snap.BoundChanged = (len(snap.LowerBound) > 0) != s.lowerBound
	s.lowerBound = len(snap.LowerBound) > 0
	if r.walk != nil {
		s.walk = r.walk
	}

	fresh := freshPublished(&s.wm, r)
	if s.spec.LeaseColumn() != "" {
		s.leases += uint64(len(s.leaseW.Observe(r.leases, r.now, len(r.leases) >= outboxsql.MaxPublishedRows)))
		s.leases += uint64(s.live.judge(r.now, r.live, r.leases, r.fates, o.LeaseUntil != ""))
	}

	s.admit(r, fresh, now)
	gauges := s.gauges(r)
	for key, g := range gauges {
		s.tuple(key, g.Labels).seen = now
	}
	if len(o.Labels) == 0 {
		s.tuple("", nil).seen = now
	}
	s.countPublished(fresh, now)
	for key, t := range s.tuples {
		if now.Sub(t.seen) > ForgetAfter {
			delete(s.tuples, key)
		}
	}
	snap.Series = s.series(gauges)
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

// countPublished counts the rows seen becoming published under their
// series, late or not by their series' deadline, and their latencies.
func (s *Sampler) countPublished(fresh []PublishedRow, now time.Time) {
	for _, p := range fresh {
		folded := s.cap.Fold(p.Labels)
		t := s.tuple(joinLabels(folded), folded)
		t.seen = now
		t.published++
		if p.NoReceipt {
			t.noReceipt++
		}
		// A row with a NULL created_at has no latency: it is counted as
		// published, never late, and stays out of the histogram.
		if p.Latency == nil {
			continue
		}
		lat := max(*p.Latency, 0)
		if Late(time.Duration(lat*float64(time.Second)), Deadline(s.o, folded)) {
			t.late++
		}
		s.hist.Observe(lat)
	}
}

// series joins the gauges of this sample with the counters of every
// series still remembered, sorted by their labels, each with its
// deadline.
func (s *Sampler) series(gauges map[string]*Series) []Series {
	keys := make([]string, 0, len(s.tuples))
	for k := range s.tuples {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []Series
	for _, k := range keys {
		t := s.tuples[k]
		x := Series{Labels: t.labels}
		if g, ok := gauges[k]; ok {
			x = *g
		}
		x.Published, x.PublishedLate, x.NoReceipt = t.published, t.late, t.noReceipt
		x.Deadline = Deadline(s.o, t.labels).Seconds()
		out = append(out, x)
	}
	return out
}

// admit admits label values and combinations, ranked by what this sample
// saw.
func (s *Sampler) admit(r *read, fresh []PublishedRow, now time.Time) {
	if len(s.o.Labels) == 0 {
		return
	}
	if r.admitted != nil && !r.fallback {
		// The capped reads admitted on a copy from these same combinations
		// (cover.go): the per label set read, which also admits, did not run.
		s.cap = r.admitted
		return
	}
	s.cap.Admit(s.combos(r, fresh), now)
}

// combos are the combinations a sample admits from: all it read except
// the probes of the capped reads (cover.go), which the admission itself
// chose. (The per label set read, when it runs, reads every series, so
// what it admits leaves none unread.)
func (s *Sampler) combos(r *read, fresh []PublishedRow) []Combo {
	combos := make([]Combo, 0, len(r.groups)+len(r.dead)+len(r.unclassified)+len(r.oldest)+len(fresh))
	for _, g := range r.groups {
		if g.part != partProbe && g.part != partProbeAge {
			combos = append(combos, Combo{Values: g.labels, Rows: g.rows, OldestAge: g.age})
		}
	}
	for _, gs := range [][]group{r.dead, r.unclassified} {
		for _, g := range gs {
			combos = append(combos, Combo{Values: g.labels, Rows: g.rows})
		}
	}
	for _, x := range r.oldest {
		combos = append(combos, Combo{Values: x.labels, OldestAge: x.age})
	}
	for _, p := range fresh {
		combos = append(combos, Combo{Values: p.Labels, Rows: 1})
	}
	return combos
}

// freshPublished observes the published rows r read on w and returns
// those not counted before.
func freshPublished(w *Watermark, r *read) []PublishedRow {
	marks := make([]Mark, len(r.published))
	for i, p := range r.published {
		marks[i] = Mark{Key: p.ID, At: p.PublishedAt}
	}
	var fresh []PublishedRow
	for _, i := range w.Observe(marks, r.now, len(r.published) >= outboxsql.MaxPublishedRows) {
		fresh = append(fresh, r.published[i])
	}
	return fresh
}

// gauges folds what the sample read into series, keyed by their labels.
// Each series is judged against its own deadline (that of its folded
// first label), the one outbox_deadline_seconds shows for it.
func (s *Sampler) gauges(r *read) map[string]*Series {
	rules := s.spec.Rules
	deadlines := s.spec.Deadlines()
	gauges := map[string]*Series{}
	series := func(folded []string, key string) *Series {
		g, ok := gauges[key]
		if !ok {
			g = &Series{Labels: folded}
			gauges[key] = g
		}
		return g
	}
	at := func(vals []string) *Series { return series(s.cap.FoldKey(vals)) }
	// A group folded by the cap the sample ended with (cover.go) is not
	// folded again.
	folded := r.admitted != nil && s.cap == r.admitted
	reached := reachedCombos(r)
	for _, g := range r.groups {
		st := rules.Classify(g.facts)
		if st == Ignored || st == Published || st == Dead {
			continue
		}
		var x *Series
		if folded && g.hasFold {
			x = series(g.folded, g.key)
		} else {
			x = at(g.labels)
		}
		if g.age > x.OldestAge {
			x.OldestAge = g.age
		}
		if s.ageOnly(g, st, r, reached) {
			continue
		}
		if g.part == partUnknown {
			// Read only for the unknown results of unclaimed rows; the
			// rows themselves are counted by the pending read.
			if rules.Unknown(st, g.facts) {
				x.Unknown += float64(g.rows)
			}
			continue
		}
		x.Events[stateIndex(st)] += float64(g.rows)
		if i := slices.Index(deadlines, Deadline(s.o, x.Labels)); i >= 0 && i < len(g.late) {
			x.PastDeadline += float64(g.late[i])
		}
		if g.facts.Attempted {
			x.Retried += float64(g.rows)
		}
		if (g.part == partAll || g.part == partClaimed) && rules.Unknown(st, g.facts) {
			x.Unknown += float64(g.rows)
		}
	}
	for _, x := range r.oldest {
		g := at(x.labels)
		g.OldestAge = max(g.OldestAge, x.age)
	}
	if r.capped {
		// The oldest age is exact: a series whose oldest row is past its
		// deadline has at least that one row past it, whichever rows the
		// capped reads reached.
		for _, g := range gauges {
			if g.OldestAge > Deadline(s.o, g.Labels).Seconds() && g.PastDeadline < 1 {
				g.PastDeadline = 1
			}
		}
	}
	for _, g := range r.dead {
		at(g.labels).Events[stateIndex(Dead)] += float64(g.rows)
	}
	for _, g := range r.unclassified {
		at(g.labels).Unclassified += float64(g.rows)
	}
	s.applyOrder(r, at)
	return gauges
}

// reachedCombos are the combinations whose pending rows the per label
// set read counted; it stops after MaxOldestTuples combinations.
func reachedCombos(r *read) map[string]bool {
	reached := map[string]bool{}
	for _, g := range r.groups {
		if g.part == partPending {
			reached[joinLabels(g.labels)] = true
		}
	}
	return reached
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

// ageOnly reports whether group g of the capped reads gives only its
// oldest age, its rows being counted by another read: the walk's claimed
// rows (the claimed reads count them), the walk's rows of a value with a
// deadline override (the overrides' read counts them), and, when the
// per label set read ran, the walk's and the overrides' rows of the
// combinations it reached (reached: it counts them; past
// MaxOldestTuples combinations it reaches no more, and the walk and
// the overrides' read count what they read of the others).
func (s *Sampler) ageOnly(g group, st State, r *read, reached map[string]bool) bool {
	counted := r.fallback && reached[joinLabels(g.labels)]
	switch g.part {
	case partWalk:
		return st != Pending || counted || len(g.labels) > 0 && s.o.Deadlines[g.labels[0]] > 0
	case partOverride:
		return st != Pending || counted
	case partProbeAge:
		return true
	}
	return false
}
