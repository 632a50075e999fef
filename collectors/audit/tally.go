package audit

import "time"

// Tally is the broker side of an audit without a Kafka client: the sampler
// and the window of sampled ids, driven with ids and record times directly.
// The auditor's tailer does the same per record; the benchmark uses Tally
// to measure a whole window's memory without a broker that holds an hour
// of records. It is not safe for concurrent use.
type Tally struct {
	sampler Sampler
	win     *window
}

// NewTally returns an empty tally of the window ending at now.
func NewTally(sample float64, span time.Duration, now time.Time) *Tally {
	return &Tally{sampler: NewSampler(sample), win: newWindow(span.Milliseconds(), now.UnixMilli())}
}

// Add records one event id carried by a record with timestamp ts, at time
// now; it reports whether the id is sampled and whether it was already in
// the window.
func (t *Tally) Add(id []byte, ts, now time.Time) (sampled, dup bool) {
	h, fp := Digest(id)
	if !t.sampler.Sampled(h) {
		return false, false
	}
	dup, _ = t.win.add(fp, ts.UnixMilli(), now.UnixMilli())
	return true, dup
}

// Advance seals and evicts buckets as of now; the tailer does it after
// every poll.
func (t *Tally) Advance(now time.Time) { t.win.advance(now.UnixMilli()) }

// Has reports whether a sampled id is in the window.
func (t *Tally) Has(id []byte) bool {
	_, fp := Digest(id)
	_, ok := t.win.lookup(fp)
	return ok
}

// Size returns the fingerprints held and their estimated bytes.
func (t *Tally) Size() (ids, bytes int) {
	s := t.win.stats()
	return s.IDs, s.Bytes
}

// Close frees the window's memory.
func (t *Tally) Close() { t.win.free() }
