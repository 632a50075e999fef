package audit

import (
	"slices"
)

// Fingerprint layout: a sampled id is kept as a 60-bit fingerprint. A
// sealed bucket stores the low 48 bits of each in 6 bytes, sorted, and
// indexes them by their top bits (at least 12, more for big buckets so
// that a prefix holds about 16 entries), so a lookup costs an index read
// and a short binary search per bucket.
const (
	fpBits        = 60
	minPrefixBits = 12
	maxPrefixBits = 22
	storedBits    = 48
	storedMask    = 1<<storedBits - 1
	entryBytes    = 6
	perPrefix     = 16
	// Buckets per window: memory holds at most one bucket more than the
	// window; lookups visit every bucket.
	bucketsPerWindow = 60
	// maxLateness is how long after its end a bucket stays open for
	// records from lagging partitions; later ones go to the oldest open
	// bucket.
	maxLateness = 15_000 // ms
	// openEntryBytes estimates a fingerprint in an open bucket's map.
	openEntryBytes = 16
)

// window holds the fingerprints of the sampled ids the tailer has seen in
// the last span milliseconds, by record timestamp. Records go to time
// buckets; a bucket is an open map while records for it may still arrive
// and is then sealed into a sorted, compact array outside the Go heap.
// Buckets that leave the window are freed whole, so memory never grows
// past one window (and one bucket) of sampled ids. window is not safe for
// concurrent use.
type window struct {
	span     int64 // ms
	width    int64 // ms per bucket
	lateness int64 // ms

	// open buckets by ascending index, all at or above sealedUpTo.
	open []*openBucket
	// sealed buckets, oldest first; every index below sealedUpTo is sealed
	// (or evicted).
	sealed     []*sealedBucket
	sealedUpTo int64
	maxTS      int64
}

type openBucket struct {
	idx int64
	set map[uint64]struct{}
}

type sealedBucket struct {
	idx   int64
	shift uint     // prefix = fp >> shift
	index []uint32 // entry offsets by prefix; len 1<<prefixBits + 1
	data  []byte   // entryBytes per entry, ascending within each prefix
}

func newWindow(span int64, now int64) *window {
	width := span / bucketsPerWindow
	if width < 1000 {
		width = 1000
	}
	return &window{
		span:       span,
		width:      width,
		lateness:   min(width, maxLateness),
		sealedUpTo: floorDiv(now-span, width),
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// add records fingerprint fp from a record with timestamp ts (ms). It
// reports whether fp was already in the window (a duplicate) and whether
// the record was inside the window at all.
func (w *window) add(fp uint64, ts, now int64) (dup, inWindow bool) {
	if ts < now-w.span {
		return false, false
	}
	_, dup = w.lookup(fp)
	idx := floorDiv(ts, w.width)
	if idx < w.sealedUpTo {
		// Late for a sealed bucket: keep it in the oldest open one. It is
		// only evicted later than its timestamp says.
		idx = w.sealedUpTo
	}
	w.openBucket(idx).set[fp] = struct{}{}
	if ts > w.maxTS {
		w.maxTS = ts
	}
	return dup, true
}

func (w *window) openBucket(idx int64) *openBucket {
	i := len(w.open)
	for i > 0 && w.open[i-1].idx >= idx {
		if w.open[i-1].idx == idx {
			return w.open[i-1]
		}
		i--
	}
	b := &openBucket{idx: idx, set: map[uint64]struct{}{}}
	w.open = slices.Insert(w.open, i, b)
	return b
}

// lookup reports whether fp is in the window and the end (ms) of the
// earliest bucket holding it: no record with the id is newer than that.
func (w *window) lookup(fp uint64) (end int64, ok bool) {
	for _, b := range w.sealed {
		if b.has(fp) {
			return (b.idx + 1) * w.width, true
		}
	}
	for _, b := range w.open {
		if _, in := b.set[fp]; in {
			return (b.idx + 1) * w.width, true
		}
	}
	return 0, false
}

// advance seals the buckets no more records are expected for (ended
// lateness before the newest record, or now if that is earlier) and
// evicts those that left the window.
func (w *window) advance(now int64) {
	upTo := min(w.maxTS, now) - w.lateness
	n := 0
	for _, b := range w.open {
		if (b.idx+1)*w.width <= upTo {
			w.sealed = append(w.sealed, seal(b.idx, b.set))
			w.sealedUpTo = max(w.sealedUpTo, b.idx+1)
			continue
		}
		w.open[n] = b
		n++
	}
	clear(w.open[n:])
	w.open = w.open[:n]
	if s := floorDiv(upTo, w.width); s > w.sealedUpTo {
		w.sealedUpTo = s
	}
	horizon := now - w.span
	n = 0
	for _, b := range w.sealed {
		if (b.idx+1)*w.width <= horizon {
			freeSlab(b.data)
			continue
		}
		w.sealed[n] = b
		n++
	}
	clear(w.sealed[n:])
	w.sealed = w.sealed[:n]
	n = 0
	for _, b := range w.open {
		if (b.idx+1)*w.width <= horizon {
			continue
		}
		w.open[n] = b
		n++
	}
	clear(w.open[n:])
	w.open = w.open[:n]
}

// prefixBitsFor sizes a bucket's index for n entries.
func prefixBitsFor(n int) uint {
	bits := uint(minPrefixBits)
	for bits < maxPrefixBits && n>>bits > perPrefix {
		bits++
	}
	return bits
}

// seal turns an open bucket into a sorted compact one.
func seal(idx int64, set map[uint64]struct{}) *sealedBucket {
	fps := make([]uint64, 0, len(set))
	for fp := range set {
		fps = append(fps, fp)
	}
	// With at least 12 prefix bits, the stored low 48 bits hold every
	// fingerprint bit below the prefix, so ordering by fingerprint orders
	// each prefix's entries by their stored value.
	slices.Sort(fps)
	bits := prefixBitsFor(len(fps))
	b := &sealedBucket{idx: idx, shift: fpBits - bits, index: make([]uint32, 1<<bits+1), data: allocSlab(len(fps) * entryBytes)}
	for i, fp := range fps {
		putEntry(b.data[i*entryBytes:], fp&storedMask)
		b.index[fp>>b.shift+1]++
	}
	for p := 1; p < len(b.index); p++ {
		b.index[p] += b.index[p-1]
	}
	return b
}

func (b *sealedBucket) has(fp uint64) bool {
	p := fp >> b.shift
	lo, hi := int(b.index[p]), int(b.index[p+1])
	want := fp & storedMask
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		v := getEntry(b.data[m*entryBytes:])
		switch {
		case v == want:
			return true
		case v < want:
			lo = m + 1
		default:
			hi = m
		}
	}
	return false
}

func (b *sealedBucket) len() int { return int(b.index[len(b.index)-1]) }

func putEntry(d []byte, v uint64) {
	_ = d[5]
	d[0], d[1], d[2], d[3], d[4], d[5] = byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

func getEntry(d []byte) uint64 {
	_ = d[5]
	return uint64(d[0])<<40 | uint64(d[1])<<32 | uint64(d[2])<<24 | uint64(d[3])<<16 | uint64(d[4])<<8 | uint64(d[5])
}

// windowStats is the window's size.
type windowStats struct {
	IDs     int // fingerprints held (an id in two buckets counts twice)
	Bytes   int // estimated memory: sealed slabs and indexes, open maps
	Buckets int
}

func (w *window) stats() windowStats {
	var s windowStats
	for _, b := range w.sealed {
		s.IDs += b.len()
		s.Bytes += cap(b.data) + 4*len(b.index)
	}
	for _, b := range w.open {
		s.IDs += len(b.set)
		s.Bytes += len(b.set) * openEntryBytes
	}
	s.Buckets = len(w.sealed) + len(w.open)
	return s
}

// free releases every slab; the window is empty afterwards.
func (w *window) free() {
	for _, b := range w.sealed {
		freeSlab(b.data)
	}
	w.sealed = nil
	w.open = nil
}
