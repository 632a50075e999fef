package reconcile

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// summary is one side's count and hash sum of a bucket.
type summary struct {
	n   int64
	sum string
}

// span is a range of positions [lo, hi].
type span struct{ lo, hi int64 }

// Buckets are cut by arithmetic on int64 positions. An integer key is its
// own position. A uuid's position is its first eight bytes, read as an
// unsigned big-endian number with the top bit flipped, so that int64
// order is uuid order: the positions [p, q] stand for the uuids from p's
// eight bytes followed by zeros to q's followed by ones. A bucket one
// position wide may hold several uuids that share their first eight
// bytes; it is read row by row.

// position is a key's position.
func (r *runner) position(k key) (int64, error) {
	if r.kt == keyInt {
		return k.i, nil
	}
	b, err := hex.DecodeString(strings.ReplaceAll(k.s, "-", ""))
	if err != nil || len(b) != 16 {
		return 0, fmt.Errorf("uuid %q", k.s)
	}
	return int64(binary.BigEndian.Uint64(b) ^ 1<<63), nil
}

// keyAt is the smallest key at position p (first) or the largest (!first).
func (r *runner) keyAt(p int64, first bool) key {
	if r.kt == keyInt {
		return key{i: p}
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(p)^1<<63)
	if !first {
		binary.BigEndian.PutUint64(b[8:], math.MaxUint64)
	}
	return key{s: formatUUID(b[:])}
}

// bounds are the ends of the buckets idx (all when nil) as query
// arguments.
func (r *runner) bounds(bs []bucket, idx []int) (los, his any) {
	var spans []span
	if idx == nil {
		spans = make([]span, len(bs))
		for i, b := range bs {
			spans[i] = span{b.lo, b.hi}
		}
	} else {
		spans = make([]span, len(idx))
		for j, i := range idx {
			spans[j] = span{bs[i].lo, bs[i].hi}
		}
	}
	return r.spanArgs(spans)
}

// spanArgs are the ends of ranges of positions as query arguments: the
// smallest and the largest key of each.
func (r *runner) spanArgs(spans []span) (los, his any) {
	if r.kt == keyInt {
		l, h := make([]int64, len(spans)), make([]int64, len(spans))
		for i, s := range spans {
			l[i], h[i] = s.lo, s.hi
		}
		return l, h
	}
	l, h := make([]string, len(spans)), make([]string, len(spans))
	for i, s := range spans {
		l[i], h[i] = r.keyAt(s.lo, true).s, r.keyAt(s.hi, false).s
	}
	return l, h
}

// summarise fills the summaries of every bucket: the authority's (with
// the outbox's) and the target's, from their databases at once.
func (r *runner) summarise(ctx context.Context, bs []bucket, mode outboxSummary) error {
	los, his := r.bounds(bs, nil)
	checkOutbox := mode != outboxSkip
	where := fmt.Sprintf("keys %d..%d", bs[0].lo, bs[len(bs)-1].hi)
	readAuthority := func(ctx context.Context) error {
		q := r.p.authorityBucketQuery(mode, r.kt, !r.w.full)
		args := []any{los, his, r.w.cut}
		if !r.w.full {
			args = append(args, r.w.from)
		}
		vals := []any{new(int64), new(int64), new(string)}
		if checkOutbox {
			vals = append(vals, new(int64), new(string))
		}
		err := query(ctx, r.p.authority, false, q, args, func(rows pgx.Rows) error {
			return scanSummaries(rows, len(bs), func(i int, vals []any) {
				b := &bs[i]
				b.authority = summary{n: *vals[0].(*int64), sum: *vals[2].(*string)}
				b.judged = *vals[1].(*int64)
				if checkOutbox {
					b.outbox = summary{n: *vals[3].(*int64), sum: *vals[4].(*string)}
				}
			}, vals...)
		})
		if err != nil {
			return fmt.Errorf("summarise authority %s: %w", where, err)
		}
		return nil
	}
	readTarget := func(ctx context.Context) error {
		err := query(ctx, r.p.target, false, r.p.targetBucketQuery(r.kt), []any{los, his}, func(rows pgx.Rows) error {
			return scanSummaries(rows, len(bs), func(i int, vals []any) {
				bs[i].target = summary{n: *vals[0].(*int64), sum: *vals[1].(*string)}
			}, new(int64), new(string))
		})
		if err != nil {
			return fmt.Errorf("summarise target %s: %w", where, err)
		}
		return nil
	}
	return r.bothSides(ctx, readAuthority, readTarget)
}

// outboxLatest summarises the outbox of the buckets idx with one row per
// key, its highest version.
func (r *runner) outboxLatest(ctx context.Context, bs []bucket, idx []int) ([]summary, error) {
	los, his := r.bounds(bs, idx)
	out := make([]summary, len(idx))
	err := query(ctx, r.p.authority, false, r.p.outboxLatestQuery(r.kt), []any{los, his}, func(rows pgx.Rows) error {
		return scanSummaries(rows, len(idx), func(i int, vals []any) {
			out[i] = summary{n: *vals[0].(*int64), sum: *vals[1].(*string)}
		}, new(int64), new(string))
	})
	if err != nil {
		return nil, fmt.Errorf("summarise outbox keys by their latest version: %w", err)
	}
	return out, nil
}

// scanSummaries reads rows of (ordinal, values...) into set, checking
// that every one of n buckets came back once.
func scanSummaries(rows pgx.Rows, n int, set func(i int, vals []any), vals ...any) error {
	seen := 0
	var ord int64
	dest := append([]any{&ord}, vals...)
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if ord < 1 || ord > int64(n) {
			return fmt.Errorf("summary for bucket %d of %d", ord, n)
		}
		set(int(ord-1), vals)
		seen++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if seen != n {
		return fmt.Errorf("%d summaries for %d buckets", seen, n)
	}
	return nil
}

// fullKeyRange is the smallest and largest key position of the authority
// and the target together.
func (s *summarised) fullKeyRange(ctx context.Context) (lo, hi int64, ok bool, err error) {
	r := s.r
	sides := [][2]string{{"a", keyRangeQuery(r.p.aTable, r.p.aKey)}}
	if r.p.target != nil {
		sides = append(sides, [2]string{"t", keyRangeQuery(r.p.tTable, r.p.tKey)})
	}
	for _, sd := range sides {
		pool := r.p.authority
		if sd[0] == "t" {
			pool = r.p.target
		}
		var first, last *string
		err := query(ctx, pool, false, sd[1], nil, func(rows pgx.Rows) error {
			for rows.Next() {
				if err := rows.Scan(&first, &last); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return 0, 0, false, fmt.Errorf("find the key range: %w", err)
		}
		if first == nil {
			continue
		}
		mn, err := r.parsePosition(*first)
		if err != nil {
			return 0, 0, false, fmt.Errorf("find the key range: %w", err)
		}
		mx, err := r.parsePosition(*last)
		if err != nil {
			return 0, 0, false, fmt.Errorf("find the key range: %w", err)
		}
		if !ok || mn < lo {
			lo = mn
		}
		if !ok || mx > hi {
			hi = mx
		}
		ok = true
	}
	return lo, hi, ok, nil
}

// parsePosition is the position of a key in its text form.
func (r *runner) parsePosition(s string) (int64, error) {
	if r.kt == keyInt {
		return strconv.ParseInt(s, 10, 64)
	}
	return r.position(key{s: s})
}

// readRanges reads the rows of the ranges of positions given, in one query
// on each side, and merges them.
func (r *runner) readRanges(ctx context.Context, spans []span) error {
	los, his := r.spanArgs(spans)
	var as []aRow
	var ts []tRow
	readAuthority := func(ctx context.Context) error {
		q, args := r.p.authorityRangesQuery(r.w, r.kt, los, his)
		var err error
		if as, err = r.queryAuthority(ctx, true, q, args, r.aBuf[:0]); err != nil {
			return fmt.Errorf("read authority rows of %d ranges: %w", len(spans), err)
		}
		r.aBuf = as
		return nil
	}
	readTarget := func(ctx context.Context) error {
		var err error
		if ts, err = r.queryTarget(ctx, r.p.targetRangesQuery(r.kt), []any{los, his}); err != nil {
			return fmt.Errorf("read target rows of %d ranges: %w", len(spans), err)
		}
		return nil
	}
	if err := r.bothSides(ctx, readAuthority, readTarget); err != nil {
		return err
	}
	r.res.RangesRead += len(spans)
	return r.compare(ctx, as, ts)
}
