package outbox

import (
	"maps"
	"sort"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
)

// SkewWindow is the commit skew the published counters tolerate (see
// outboxsql.SkewWindow, where the reads of published rows use it).
const SkewWindow = outboxsql.SkewWindow

// Mark is one row read by a watermark query: its key and the time it
// crossed the watermark, in microseconds since the Unix epoch.
type Mark struct {
	Key string
	At  int64
}

// PublishedRow is one row read by the published-rows query.
type PublishedRow struct {
	ID     string
	Labels []string
	// PublishedAt is published_at in microseconds since the Unix epoch.
	PublishedAt int64
	// Latency is published_at - created_at in seconds; nil when
	// created_at is NULL (such a row has no latency, not a latency of 0).
	Latency *float64
	// NoReceipt: the receipt column is NULL or empty (outboxsql/receipt.go).
	NoReceipt bool
	// Overtakes is the row's aggregate when an unpublished row of it has
	// a lower sequence, Sequence the row's (order_track.go).
	Overtakes *string
	Sequence  string
}

// Watermark decides which rows crossed a point in time since the last
// read, each once: rows becoming published (at published_at) and leases
// expiring (at lease_until, or claimed_at + lease_ttl). The zero value
// starts at the first Observe, counting nothing before it.
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
// read at database time now.
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

// Observe takes the marks read with At > From(now), in At order, at
// database time now; full says the read hit its limit, so marks past the
// last one remain. It returns the indexes of the marks to count: none on
// the first call (the counters start at the exporter's start, not at the
// table's history), afterwards those not counted before.
func (w *Watermark) Observe(marks []Mark, now int64, full bool) []int {
	if w.seen == nil {
		w.seen = map[string]int64{}
	}
	var fresh []int
	for i, m := range marks {
		if _, ok := w.seen[m.Key]; ok {
			continue
		}
		w.seen[m.Key] = m.At
		if w.started {
			fresh = append(fresh, i)
		}
	}
	w.started = true
	if full && len(marks) > 0 {
		last := marks[len(marks)-1].At
		if last == marks[0].At && w.catchingUp && w.cursor == last {
			// More marks share one time than a read returns: step past
			// them rather than read the same ones forever.
			last++
		}
		w.cursor = last
		w.catchingUp = true
	} else {
		w.now = now
		w.catchingUp = false
	}
	from := w.From(now)
	for k, at := range w.seen {
		if at <= from {
			delete(w.seen, k)
		}
	}
	return fresh
}

// Clone returns a copy of w that observes apart from it.
func (w *Watermark) Clone() Watermark {
	c := *w
	c.seen = maps.Clone(w.seen)
	return c
}

// Started reports whether the watermark has read once: until then the
// next read's lower bound is now() - SkewWindow, taken by the query
// itself.
func (w *Watermark) Started() bool { return w.started }

// Remembered is how many keys the watermark holds.
func (w *Watermark) Remembered() int { return len(w.seen) }

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
