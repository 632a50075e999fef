package outbox

import (
	"sort"
	"time"
)

// SkewWindow is the commit skew the published counters tolerate: a row
// whose transaction commits up to SkewWindow after its published_at is
// still counted, exactly once. Each read of published rows goes back
// SkewWindow before the previous read's time, and the ids already counted
// inside that trailing window are remembered, so a re-read row is not
// counted again. A row that becomes visible later than SkewWindow after
// its published_at is missed.
const SkewWindow = 30 * time.Second

// PublishedRow is one row read by the published-rows query.
type PublishedRow struct {
	ID     string
	Labels []string
	// PublishedAt is published_at in microseconds since the Unix epoch.
	PublishedAt int64
	// Latency is published_at - created_at in seconds.
	Latency float64
}

// Watermark decides which published rows are new. The zero value starts
// at the first Observe, counting nothing before it.
type Watermark struct {
	started bool
	// now is the database time of the last read that was not full.
	now int64
	// cursor is, while catching up on more rows than one read returns,
	// the published_at of the last row read.
	cursor     int64
	catchingUp bool
	// seen holds ids read whose published_at is inside the next read's
	// range, with that published_at.
	seen map[string]int64
}

// From returns the exclusive lower bound, in microseconds, of the next
// read of published rows at database time now.
func (w *Watermark) From(now int64) int64 {
	if !w.started {
		return now - SkewWindow.Microseconds()
	}
	from := w.now - SkewWindow.Microseconds()
	if w.catchingUp && w.cursor-1 > from {
		from = w.cursor - 1
	}
	return from
}

// Observe takes the rows read with published_at > From(now), in
// published_at order, at database time now; full says the read hit its
// limit, so rows past the last one remain. It returns the rows to count:
// none on the first call (the counters start at the exporter's start, not
// at the table's history), afterwards those not counted before.
func (w *Watermark) Observe(rows []PublishedRow, now int64, full bool) []PublishedRow {
	if w.seen == nil {
		w.seen = map[string]int64{}
	}
	var fresh []PublishedRow
	for _, r := range rows {
		if _, ok := w.seen[r.ID]; ok {
			continue
		}
		w.seen[r.ID] = r.PublishedAt
		if w.started {
			fresh = append(fresh, r)
		}
	}
	w.started = true
	if full && len(rows) > 0 {
		last := rows[len(rows)-1].PublishedAt
		if last == rows[0].PublishedAt && w.catchingUp && w.cursor == last {
			// More rows share one published_at than a read returns: step
			// past them rather than read the same ones forever.
			last++
		}
		w.cursor = last
		w.catchingUp = true
	} else {
		w.now = now
		w.catchingUp = false
	}
	from := w.From(now)
	for id, p := range w.seen {
		if p <= from {
			delete(w.seen, id)
		}
	}
	return fresh
}

// Remembered is how many ids the watermark holds.
func (w *Watermark) Remembered() int { return len(w.seen) }

// LeaseKey identifies one lease of one row: a row that is claimed again
// gets a new lease_until (or claimed_at), so a new key.
type LeaseKey struct {
	ID string
	// Lease is lease_until or claimed_at in microseconds since the epoch.
	Lease int64
}

// LeaseTracker counts distinct (row, lease) expiries across samples.
type LeaseTracker struct {
	// Total is the number of distinct expiries observed.
	Total uint64
	known map[LeaseKey]bool
}

// Observe takes the keys of the rows whose lease is expired now; complete
// says the read was not cut by a limit. It returns how many expiries are
// new. A key is remembered while its row stays expired; when the read is
// complete, keys no longer present are forgotten (the row was published,
// released or claimed again), so memory stays bounded by the rows
// currently expired. When the read was cut, keys are kept, up to bound.
func (t *LeaseTracker) Observe(keys []LeaseKey, complete bool, bound int) int {
	if t.known == nil {
		t.known = map[LeaseKey]bool{}
	}
	fresh := 0
	now := make(map[LeaseKey]bool, len(keys))
	for _, k := range keys {
		now[k] = true
		if !t.known[k] {
			fresh++
		}
	}
	t.Total += uint64(fresh)
	if complete || len(t.known)+fresh > bound {
		t.known = now
		return fresh
	}
	for k := range now {
		t.known[k] = true
	}
	return fresh
}

// Histogram is a cumulative histogram of publish latencies.
type Histogram struct {
	Bounds []float64
	counts []uint64
	Count  uint64
	Sum    float64
}

// LatencyBuckets are the upper bounds of outbox_publish_latency_seconds.
var LatencyBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// Observe adds one latency in seconds.
func (h *Histogram) Observe(v float64) {
	if h.counts == nil {
		h.counts = make([]uint64, len(h.Bounds))
	}
	i := sort.SearchFloat64s(h.Bounds, v)
	if i < len(h.counts) {
		h.counts[i]++
	}
	h.Count++
	h.Sum += v
}

// Buckets returns the cumulative count at each bound, as
// prometheus.MustNewConstHistogram wants it.
func (h *Histogram) Buckets() map[float64]uint64 {
	out := make(map[float64]uint64, len(h.Bounds))
	var acc uint64
	for i, b := range h.Bounds {
		if h.counts != nil {
			acc += h.counts[i]
		}
		out[b] = acc
	}
	return out
}
