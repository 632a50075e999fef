package reconcile

import (
	"context"
	"fmt"
	"time"
)

// streamed decides a scope by reading every row of both sides: pages of
// the authority (joined with the outbox) of chunkRows keys, each with the
// target's rows of the same key range, merged in Go. It is the way for
// text keys and keys of different types on the two sides, and, with
// StreamRuns, for any job.
type streamed struct {
	r *runner
}

// bound is one end of a key range; none marks a range that holds no
// value of the column's type.
type bound struct {
	set       bool
	inclusive bool
	none      bool
	k         key
}

// walk compares the scope chunk by chunk. A chunk is a page of the
// authority after lo; its last key hi bounds the target's range (lo, hi].
// The target's range of one chunk is read together with the authority's
// next page, so both databases work at once and the target is always read
// after the authority rows it is compared with.
func (s *streamed) walk(ctx context.Context, sc scope) error {
	r := s.r
	var lo, limit bound
	if !sc.full {
		lo = bound{set: true, inclusive: true, k: sc.lo}
		limit = bound{set: true, inclusive: true, k: sc.hi}
	}
	tlo := r.targetLower(lo)
	var bufs [2][]aRow
	// curRows is the page size cur was read with: a shorter page is the
	// last.
	curRows := r.chunkRows
	cur, err := r.fetchAuthority(ctx, lo, limit, curRows, bufs[0][:0])
	if err != nil {
		return err
	}
	bufs[0] = cur
	for chunk := 0; ; chunk++ {
		last := len(cur) < curRows
		hi := limit
		if !last {
			hi = bound{set: true, inclusive: true, k: cur[len(cur)-1].k}
		}
		thi := r.targetUpper(hi, tlo)
		var (
			ts           []tRow
			next         []aRow
			nextRows     = r.chunkRows
			aTook, tTook time.Duration
		)
		readNext := func(ctx context.Context) error {
			if last {
				return nil
			}
			t := time.Now()
			var err error
			next, err = r.fetchAuthority(ctx, bound{set: true, k: hi.k}, limit, nextRows, bufs[(chunk+1)%2][:0])
			aTook = time.Since(t)
			return err
		}
		readTarget := func(ctx context.Context) error {
			t := time.Now()
			var err error
			ts, err = r.fetchTarget(ctx, tlo, thi)
			tTook = time.Since(t)
			return err
		}
		if err := r.bothSides(ctx, readNext, readTarget); err != nil {
			return err
		}
		if !last {
			bufs[(chunk+1)%2] = next
		}
		r.res.RangesRead++
		if err := r.compare(ctx, cur, ts); err != nil {
			return err
		}
		r.res.Chunks++
		if last {
			return nil
		}
		r.resize(max(aTook, tTook))
		if r.hooks.afterChunk != nil {
			r.hooks.afterChunk(chunk)
		}
		lo, cur, curRows = bound{set: true, k: hi.k}, next, nextRows
		if !thi.none {
			tlo = bound{set: true, k: thi.k}
		}
	}
}

// resize adapts the chunk's row count to chunk_time, as Percona's
// pt-table-checksum does with --chunk-time.
func (r *runner) resize(took time.Duration) {
	n := r.chunkRows * 2
	if took > 0 {
		n = int(float64(r.chunkRows) * float64(r.chunkTime) / float64(took))
	}
	n = min(n, r.chunkRows*2, r.maxRows)
	r.chunkRows = max(n, r.chunkRows/2, r.minRows)
}

// targetLower is the lower bound b of authority keys as a bound on the
// target's keys. Only a text authority against a uuid target needs work:
// the smallest uuid whose text is above b.
func (r *runner) targetLower(b bound) bound {
	if !b.set || r.tt != keyUUID || r.kt == keyUUID {
		return b
	}
	s, ok := uuidAbove(b.k.s, !b.inclusive)
	if !ok {
		return bound{set: true, none: true}
	}
	return bound{set: true, inclusive: true, k: key{s: s}}
}

// targetUpper is the upper bound b of authority keys as a bound on the
// target's keys, never below the range's lower bound lo: the target's
// ranges then tile its key space, whatever order the authority's
// collation puts the bounds in, so every target row is read once (one
// read in the wrong chunk looks like a gap, which the re-check clears).
func (r *runner) targetUpper(b, lo bound) bound {
	if !b.set || r.tt != keyUUID || r.kt == keyUUID {
		return b
	}
	s, ok := uuidBelow(b.k.s)
	if !ok || lo.none || lo.set && (s < lo.k.s || s == lo.k.s && !lo.inclusive) {
		return bound{set: true, none: true}
	}
	return bound{set: true, inclusive: true, k: key{s: s}}
}

// fetchAuthority reads one chunk of the authority joined with the outbox
// in one read-only transaction whose plan is a merge join of two index
// ranges: a hash join of the same query spills to disk on large ranges,
// and parallel workers would only add processes to a background job.
func (r *runner) fetchAuthority(ctx context.Context, lo, limit bound, n int, buf []aRow) ([]aRow, error) {
	q, args := r.p.chunkQuery(r.w, lo, limit, n, r.kt)
	out, err := r.queryAuthority(ctx, true, q, args, buf)
	if err != nil {
		return nil, fmt.Errorf("read authority chunk: %w", err)
	}
	return out, nil
}

func (r *runner) fetchTarget(ctx context.Context, lo, hi bound) ([]tRow, error) {
	if r.p.target == nil || lo.none || hi.none {
		return nil, nil
	}
	q, args := r.p.targetChunkQuery(lo, hi, r.tt)
	out, err := r.queryTarget(ctx, q, args)
	if err != nil {
		return nil, fmt.Errorf("read target chunk: %w", err)
	}
	return out, nil
}
