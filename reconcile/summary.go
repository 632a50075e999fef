package reconcile

import (
	"context"
	"math"
	"slices"
	"time"
)

// summarised decides a scope of integer or uuid keys (a full sweep, or
// the key range of a window's rows) by comparing summaries of key ranges,
// not rows, as data-diff does but with a wide fan-out. A chunk of the key
// space, sized to chunk_time, is cut into buckets of about bucketRows
// rows, and each side summarises every bucket of the chunk in one query:
// a count and the sum of a 64-bit hash of (key, version) (rowHash), over
// an index range per bucket. The authority's query also summarises the
// outbox rows of each bucket. A bucket is clean when
//
//   - the target's summary equals the authority's: the target holds exactly
//     the authority's keys at their versions, once each, so nothing is
//     missing, stale, orphaned or duplicated, whatever the outbox says; and
//   - for an outbox that keeps its rows, the outbox's summary equals the
//     authority's as well: every authority row's version has its outbox
//     row. An outbox that also keeps the rows of older versions differs
//     here; its buckets are summarised again with one row per key (its
//     highest version), and clean if that equals the authority's. When
//     most buckets of a chunk needed that, the next chunks' queries
//     summarise the outbox by latest version from the start.
//
// A bucket that differs is read row by row and merged like a streamed
// chunk, or, if it holds many more rows than leafRows, cut into smaller
// buckets and summarised again. Rows too young to judge and unpublished
// events make their buckets differ; they are decided row by row. Only the
// summaries of clean buckets leave the servers: on 10M rows with 100 gaps
// this reads about 1% of the rows (bench/reconcile.md).
type summarised struct {
	r *runner
	// bucketRows is what buckets are cut for now (resizeBuckets).
	bucketRows int
	// outboxMode is how the summaries read the outbox.
	outboxMode outboxSummary
}

const (
	defaultLeafRows = 1024
	// maxBuckets bounds the buckets of one summary query.
	maxBuckets = 4096
	// maxChunkWidth keeps key arithmetic within int64.
	maxChunkWidth = uint64(1) << 62
)

// bucket is one key range [lo, hi] of a chunk and what each side holds.
type bucket struct {
	lo, hi    int64
	authority summary
	judged    int64
	outbox    summary
	target    summary
}

func (b *bucket) rows() int64 { return max(b.authority.n, b.outbox.n, b.target.n) }

func (b *bucket) width() uint64 { return uint64(b.hi) - uint64(b.lo) + 1 }

// rangeStats is what the summaries of a chunk found.
type rangeStats struct {
	rows              int64 // the larger side of each bucket, summed
	nonEmpty, differs int   // buckets holding rows; those that differed
	// outboxOnly counts the buckets where only the outbox's summary
	// differed (summarised again by latest version).
	outboxOnly int
}

// walk compares the key positions of the scope in chunks: from the
// smallest to the largest key of either side for a full sweep, the key
// range of the window's rows for a windowed run.
func (s *summarised) walk(ctx context.Context, sc scope) error {
	r := s.r
	lo, hi, ok, err := s.scopeRange(ctx, sc)
	if err != nil || !ok {
		return err
	}
	// A chunk's width is in keys. Unique integer keys hold at most one row
	// per key, so the first chunk holds at most chunkRows rows; the width
	// then follows the time each chunk took and the density it found.
	width := uint64(max(r.chunkRows, 1))
	density := 1.0
	s.bucketRows = r.leafRows
	if r.p.hasOutbox && !r.p.deleteOnPublish {
		s.outboxMode = outboxAllRows
	}
	for cur := lo; ; {
		end := hi
		if uint64(hi)-uint64(cur) >= width {
			end = cur + int64(width-1)
		}
		span := uint64(end) - uint64(cur) + 1
		t := time.Now()
		st, err := s.decide(ctx, cur, end, bucketWidth(span, density, s.bucketRows))
		if err != nil {
			return err
		}
		r.res.Chunks++
		if end == hi {
			return nil
		}
		density = float64(st.rows) / float64(span)
		s.resizeBuckets(st)
		if s.outboxMode == outboxAllRows && st.outboxOnly*2 > st.nonEmpty {
			s.outboxMode = outboxLatest
		}
		width = s.nextWidth(width, time.Since(t), density)
		if r.hooks.afterChunk != nil {
			r.hooks.afterChunk(r.res.Chunks - 1)
		}
		cur = end + 1
	}
}

// scopeRange is the scope's range of positions.
func (s *summarised) scopeRange(ctx context.Context, sc scope) (lo, hi int64, ok bool, err error) {
	if sc.full {
		return s.fullKeyRange(ctx)
	}
	if lo, err = s.r.position(sc.lo); err == nil {
		hi, err = s.r.position(sc.hi)
	}
	return lo, hi, err == nil, err
}

// decide settles the chunk [lo, hi] cut in buckets of width keys: a clean
// bucket by its summaries; a differing one by reading its rows, adjacent
// ones together and a chunk's reads in as few queries as fit a streamed
// chunk's rows; a differing bucket much larger than leafRows is queued to
// be cut smaller and summarised again. The stats are those of the
// chunk's own buckets.
func (s *summarised) decide(ctx context.Context, lo, hi int64, width uint64) (rangeStats, error) {
	type level struct {
		lo, hi int64
		width  uint64
	}
	var st rangeStats
	reads := &rangeReads{r: s.r}
	queue := []level{{lo, hi, width}}
	for first := true; len(queue) > 0; first = false {
		l := queue[0]
		queue = queue[1:]
		bs := buckets(l.lo, l.hi, l.width)
		differ, lst, err := s.differing(ctx, bs)
		if err != nil {
			return st, err
		}
		if first {
			st = lst
		}
		for _, i := range differ {
			b := &bs[i]
			if n := b.rows(); n > int64(s.r.leafRows) && b.width() > 1 {
				sub := max(1, min(b.width()/2, uint64(float64(b.width())*float64(s.r.leafRows)/float64(n))))
				queue = append(queue, level{b.lo, b.hi, sub})
				continue
			}
			if err := reads.add(ctx, b.lo, b.hi, b.rows()); err != nil {
				return st, err
			}
		}
	}
	return st, reads.flush(ctx)
}

// differing summarises the buckets and returns those that differ, in key
// order; it counts the judged rows of the clean ones.
func (s *summarised) differing(ctx context.Context, bs []bucket) ([]int, rangeStats, error) {
	r := s.r
	var st rangeStats
	mode := s.outboxMode
	if err := r.summarise(ctx, bs, mode); err != nil {
		return nil, st, err
	}
	var outboxOnly, differ []int
	for i := range bs {
		b := &bs[i]
		st.rows += b.rows()
		if b.rows() > 0 {
			st.nonEmpty++
		}
		targetOK := r.p.target == nil || b.target == b.authority
		outboxOK := mode == outboxSkip || b.outbox == b.authority
		switch {
		case targetOK && outboxOK:
			r.res.RowsChecked += b.judged
		case targetOK && mode == outboxAllRows:
			outboxOnly = append(outboxOnly, i)
		default:
			differ = append(differ, i)
		}
	}
	st.outboxOnly = len(outboxOnly)
	if len(outboxOnly) > 0 {
		latest, err := r.outboxLatest(ctx, bs, outboxOnly)
		if err != nil {
			return nil, st, err
		}
		for j, i := range outboxOnly {
			if latest[j] == bs[i].authority {
				r.res.RowsChecked += bs[i].judged
				continue
			}
			differ = append(differ, i)
		}
		slices.Sort(differ)
	}
	st.differs = len(differ)
	return differ, st, nil
}

// rangeReads batches the ranges of positions to read row by row.
type rangeReads struct {
	r     *runner
	spans []span
	rows  int64
}

// add queues [lo, hi] (about n rows), reading the batch first if it would
// exceed a streamed chunk's rows.
func (b *rangeReads) add(ctx context.Context, lo, hi, n int64) error {
	if len(b.spans) > 0 && b.rows+n > int64(b.r.maxRows) {
		if err := b.flush(ctx); err != nil {
			return err
		}
	}
	if k := len(b.spans); k > 0 && b.spans[k-1].hi+1 == lo {
		b.spans[k-1].hi = hi
	} else {
		b.spans = append(b.spans, span{lo, hi})
	}
	b.rows += n
	return nil
}

func (b *rangeReads) flush(ctx context.Context) error {
	if len(b.spans) == 0 {
		return nil
	}
	err := b.r.readRanges(ctx, b.spans)
	b.spans, b.rows = b.spans[:0], 0
	return err
}

// resizeBuckets adapts the rows a bucket is cut for to how many buckets
// differ. Each differing bucket costs reading its rows; each bucket costs
// an index descent and an aggregate on each side. Keys in key order
// (serials, time-ordered ids) keep the rows not yet decided (too young to
// judge, not yet published) together in a few buckets; random keys (uuid
// v4) spread them over as many buckets as there are rows: smaller buckets
// then read fewer rows (bench/reconcile.md, uuid keys).
func (s *summarised) resizeBuckets(st rangeStats) {
	leaf := s.r.leafRows
	switch minRows := max(1, leaf/16); {
	case st.differs*16 > st.nonEmpty && s.bucketRows > minRows:
		s.bucketRows = max(minRows, s.bucketRows/2)
	case st.differs*64 < st.nonEmpty && s.bucketRows < leaf:
		s.bucketRows = min(leaf, s.bucketRows*2)
	}
}

// nextWidth resizes a chunk after one that took took: toward chunk_time,
// at most doubling or halving a step, at most maxBuckets buckets of
// bucketRows rows at the density seen, at least minRows keys.
func (s *summarised) nextWidth(width uint64, took time.Duration, density float64) uint64 {
	scale := 2.0
	if took > 0 {
		scale = min(2, max(0.5, float64(s.r.chunkTime)/float64(took)))
	}
	w := float64(width) * scale
	if density > 0 {
		w = min(w, float64(maxBuckets*s.bucketRows)/density)
	}
	w = min(max(w, float64(s.r.minRows), 1), float64(maxChunkWidth))
	return uint64(w)
}

// bucketWidth cuts span keys into buckets of about leafRows rows at the
// given density, at most maxBuckets of them.
func bucketWidth(span uint64, density float64, leafRows int) uint64 {
	n := math.Ceil(float64(span) * density / float64(max(leafRows, 1)))
	n = min(max(n, 1), maxBuckets)
	return max(1, uint64(math.Ceil(float64(span)/n)))
}

// buckets cuts [lo, hi] into ranges of width keys (the last may be
// shorter).
func buckets(lo, hi int64, width uint64) []bucket {
	var out []bucket
	for cur := lo; ; {
		end := hi
		if uint64(hi)-uint64(cur) >= width {
			end = cur + int64(width-1)
		}
		out = append(out, bucket{lo: cur, hi: end})
		if end == hi {
			return out
		}
		cur = end + 1
	}
}
