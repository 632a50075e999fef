package audit

import (
	"slices"
)

// Fingerprint layout: a sampled id is kept as a 60-bit fingerprint. A
// sealed bucket indexes the top prefixBits and stores the low 48 bits in 6
// bytes, so each id costs 6 bytes once its bucket is sealed.
const (
	prefixBits  = 12
	prefixCount = 1 << prefixBits
	storedBits  = 48
	storedMask  = 1<<storedBits - 1
	entryBytes  = 6
	// Buckets per window: eviction is this fine-grained.
	bucketsPerWindow = 60
	// openEntryBytes estimates a fingerprint in an open bucket's map.
	openEntryBytes = 24
	indexBytes     = (prefixCount + 1) * 4
)

// window holds the fingerprints of the sampled ids the tailer has seen in
// the last span milliseconds, by record timestamp. Records go to time
// buckets; a bucket is an open map while records for it may still arrive
// and is then sealed into a sorted, compact array outside the Go heap.
// Buckets that leave the window are freed whole, so memory never grows
// past one window of sampled ids. window is not safe for concurrent use.
type window struct {
	span  int64 // ms
	width int64 // ms per bucket

	open map[int64]map[uint64]struct{}
	// sealed buckets, oldest first; every index below sealedUpTo is sealed
	// (or evicted), every open index is at or above it.
	sealed     []*sealedBucket
	sealedUpTo int64
	maxTS      int64
}

type sealedBucket struct {
	idx   int64
	index []uint32 // entry offsets by prefix; len prefixCount+1
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
		open:       map[int64]map[uint64]struct{}{},
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
	b := w.open[idx]
	if b == nil {
		b = map[uint64]struct{}{}
		w.open[idx] = b
	}
	b[fp] = struct{}{}
	if ts > w.maxTS {
		w.maxTS = ts
	}
	return dup, true
}

// lookup reports whether fp is in the window and the end (ms) of the
// earliest bucket holding it: no record with the id is newer than that.
func (w *window) lookup(fp uint64) (end int64, ok bool) {
	for _, b := range w.sealed {
		if b.has(fp) {
			return (b.idx + 1) * w.width, true
		}
	}
	first, found := int64(0), false
	for idx, b := range w.open {
		if _, in := b[fp]; in && (!found || idx < first) {
			first, found = idx, true
		}
	}
	if found {
		return (first + 1) * w.width, true
	}
	return 0, false
}

// advance seals the buckets no more records are expected for (two bucket
// widths behind the newest record, or now if that is earlier) and evicts
// those that left the window.
func (w *window) advance(now int64) {
	upTo := min(w.maxTS, now)
	sealBefore := floorDiv(upTo, w.width) - 1
	if sealBefore > w.sealedUpTo {
		var idxs []int64
		for idx := range w.open {
			if idx < sealBefore {
				idxs = append(idxs, idx)
			}
		}
		slices.Sort(idxs)
		for _, idx := range idxs {
			w.sealed = append(w.sealed, seal(idx, w.open[idx]))
			delete(w.open, idx)
		}
		w.sealedUpTo = sealBefore
	}
	horizon := now - w.span
	n := 0
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
	for idx := range w.open {
		if (idx+1)*w.width <= horizon {
			delete(w.open, idx)
		}
	}
}

// seal turns an open bucket into a sorted compact one.
func seal(idx int64, set map[uint64]struct{}) *sealedBucket {
	fps := make([]uint64, 0, len(set))
	for fp := range set {
		fps = append(fps, fp)
	}
	slices.Sort(fps)
	b := &sealedBucket{idx: idx, index: make([]uint32, prefixCount+1), data: allocSlab(len(fps) * entryBytes)}
	n := 0
	var last uint64
	for i, fp := range fps {
		// Fingerprints that differ only in bits not stored collapse.
		if i > 0 && fp>>storedBits == last>>storedBits && fp&storedMask == last&storedMask {
			continue
		}
		last = fp
		putEntry(b.data[n*entryBytes:], fp&storedMask)
		b.index[fp>>storedBits+1]++
		n++
	}
	for p := 1; p <= prefixCount; p++ {
		b.index[p] += b.index[p-1]
	}
	return b
}

func (b *sealedBucket) has(fp uint64) bool {
	p := fp >> storedBits
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

func (b *sealedBucket) len() int { return int(b.index[prefixCount]) }

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
		s.Bytes += cap(b.data) + indexBytes
	}
	for _, b := range w.open {
		s.IDs += len(b)
		s.Bytes += len(b) * openEntryBytes
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
	w.open = map[int64]map[uint64]struct{}{}
}
