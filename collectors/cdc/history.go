package cdc

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// LSN is a position in the write-ahead log, in bytes from its start.
type LSN uint64

// ParseLSN reads PostgreSQL's text form of a pg_lsn, "16/B374D848".
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("parse lsn %q: no '/'", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("parse lsn %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("parse lsn %q: %w", s, err)
	}
	return LSN(h<<32 | l), nil
}

func (l LSN) String() string { return fmt.Sprintf("%X/%X", uint64(l)>>32, uint32(l)) }

// Sample is one observation of the server: at At its WAL position was LSN.
type Sample struct {
	At  time.Time
	LSN LSN
}

// DefaultHistorySize is how many samples a History keeps. At a 15s
// scrape interval that reaches back 17 hours; at 1s, 68 minutes. A slot
// further behind than the history reaches is reported as at least the
// history's span, marked as a lower bound.
const DefaultHistorySize = 4096

// SampleBytes is the memory one kept sample takes: the History stores the
// time as Unix nanoseconds and the position, 8 bytes each.
const SampleBytes = 16

// History is a bounded record of where the server's WAL position was
// when, sampled at every collection. Turning a slot's confirmed position
// back into a time is what makes its lag a deadline signal: the position
// is a byte count, the deadline is in seconds.
//
// One History serves every slot of a server. It is safe for concurrent
// use.
type History struct {
	mu sync.Mutex
	// ring holds the samples oldest first from start; at most cap(ring).
	at    []int64
	lsn   []LSN
	start int
	n     int
	// minGap: a sample closer than this to the previous one replaces it,
	// so a burst of scrapes cannot push the history's reach down to
	// seconds.
	minGap time.Duration
	// seeded is true while the oldest sample came from Seed (the last
	// checkpoint), not from a collection: the interval after it is not a
	// collection interval and may be hours long.
	seeded bool
	// seedReached is when the position had surely reached the seed's:
	// the time a lower bound behind the seed counts from.
	seedReached int64
}

// NewHistory returns a History keeping at most size samples, at least
// minGap apart.
func NewHistory(size int, minGap time.Duration) *History {
	if size < 2 {
		size = 2
	}
	return &History{at: make([]int64, size), lsn: make([]LSN, size), minGap: minGap}
}

func (h *History) idx(i int) int { return (h.start + i) % len(h.at) }

// Add records that the server's position was lsn at time at. Samples must
// come in time order; one older than the newest is ignored. A position
// behind the newest means the server was replaced (a restore, a failover
// to a replica that had not received everything): the old positions say
// nothing about the new server's, so the history starts again.
func (h *History) Add(at time.Time, lsn LSN) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := at.UnixNano()
	if h.n > 0 {
		last := h.idx(h.n - 1)
		switch {
		case lsn < h.lsn[last]:
			h.start, h.n, h.seeded = 0, 0, false
		case t < h.at[last]:
			return
		case lsn == h.lsn[last], h.n > 1 && time.Duration(t-h.at[h.idx(h.n-2)]) < h.minGap:
			// An unchanged position needs only its latest time: the
			// position left lsn after it. A sample too close to the one
			// before the newest replaces the newest. A seed alone is
			// now a collection's own observation.
			h.at[last], h.lsn[last] = t, lsn
			if h.n == 1 {
				h.seeded = false
			}
			return
		}
	}
	if h.n == len(h.at) {
		h.start = h.idx(1)
		h.n--
		h.seeded = false
	}
	i := h.idx(h.n)
	h.at[i], h.lsn[i] = t, lsn
	h.n++
}

// Seed records an older observation of an exact time: the position was
// lsn at at (SeedRange with one time).
func (h *History) Seed(at time.Time, lsn LSN) { h.SeedRange(at, at, lsn) }

// SeedRange records an older observation, such as the last checkpoint's
// redo position, known only to a range of time: at before the position
// was at most lsn, by reached it was at least lsn. It goes in front of the
// history when it is older than everything kept and not ahead of it;
// otherwise it is ignored. It gives the first collections after a start
// something to measure against: a position after it is placed at before
// (never later than the truth), one behind it at reached (a lower bound,
// never earlier than the truth).
func (h *History) SeedRange(before, reached time.Time, lsn LSN) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := before.UnixNano()
	if h.n == len(h.at) {
		return
	}
	if h.n > 0 && (t >= h.at[h.start] || lsn > h.lsn[h.start]) {
		return
	}
	if h.n > 0 && lsn == h.lsn[h.start] {
		// The kept sample already says the position was there, later.
		return
	}
	h.start = (h.start - 1 + len(h.at)) % len(h.at)
	h.at[h.start], h.lsn[h.start] = t, lsn
	h.n++
	h.seeded = true
	h.seedReached = max(t, reached.UnixNano())
	if h.n > 1 {
		h.seedReached = min(h.seedReached, h.at[h.idx(1)])
	}
}

// Len returns how many samples are kept.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// Samples returns the kept samples, oldest first.
func (h *History) Samples() []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Sample, h.n)
	for i := range out {
		j := h.idx(i)
		out[i] = Sample{At: time.Unix(0, h.at[j]), LSN: h.lsn[j]}
	}
	return out
}

// Position is when the server's WAL position was at a given LSN.
type Position struct {
	// At is the latest time the server's position was at or before the
	// LSN: after At, everything written is beyond it.
	At time.Time
	// LowerBound is true when the LSN is older than the whole history:
	// At is the oldest sample's time (a seed's: when the position had
	// surely reached it) and the truth is earlier.
	LowerBound bool
	// Resolution is the length of the sampled interval the server
	// passed the LSN in: the truth lies within Resolution after At. Zero
	// when the history cannot place it.
	Resolution time.Duration
	// UpperBound is true when the LSN lies after a seeded observation
	// (the last checkpoint) and before the first collection's sample: At
	// is never later than the truth, but it may be earlier by more than
	// one collection interval, by as much as Resolution.
	UpperBound bool
	// CaughtUp is true when the LSN is at or past the newest sample.
	CaughtUp bool
}

// When returns when the server's position was last at or before lsn,
// erring early: the server passed lsn somewhere between the two samples
// around it, and the answer is the earlier one. A lag measured from it is
// never less than the truth and at most one sampling interval more, and
// the rows committed after it are a superset of those the slot has not
// confirmed. (Placing lsn by linear interpolation assumed the WAL was
// written evenly between the samples: after a burst and a stall it put a
// slot stuck just after the burst near the newest sample, at a lag of 0,
// most of all between the checkpoint and the first sample after a
// start.) An lsn at or beyond the newest sample is caught up
// (At is the newest sample's time); an empty history knows nothing and
// returns the zero Position with ok false.
func (h *History) When(lsn LSN) (p Position, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return Position{}, false
	}
	newest := h.idx(h.n - 1)
	if lsn >= h.lsn[newest] {
		return Position{At: time.Unix(0, h.at[newest]), CaughtUp: true}, true
	}
	oldest := h.start
	if lsn < h.lsn[oldest] {
		at := h.at[oldest]
		if h.seeded {
			at = h.seedReached
		}
		return Position{At: time.Unix(0, at), LowerBound: true}, true
	}
	// Binary search for the last sample at or before lsn: positions only
	// grow along the ring.
	lo, hi := 0, h.n-1 // lsn[lo] <= lsn < lsn[hi]
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if h.lsn[h.idx(mid)] <= lsn {
			lo = mid
		} else {
			hi = mid
		}
	}
	a, b := h.idx(lo), h.idx(hi)
	return Position{At: time.Unix(0, h.at[a]), Resolution: time.Duration(h.at[b] - h.at[a]),
		UpperBound: lo == 0 && h.seeded}, true
}
