package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"
)

// window is the part of the authority one run judges: rows created before
// cut (the database's now() minus grace) and, unless full, at or after
// from (now() minus window).
type window struct {
	full      bool
	now       time.Time
	cut, from time.Time
}

// Chunk sizing: a chunk starts at initialChunkRows and is resized after
// each one so that its slower side takes about chunk_time, within
// [minChunkRows, maxChunkRows], growing at most 2x a step.
const (
	initialChunkRows = 10_000
	minChunkRows     = 1_000
	maxChunkRows     = 100_000
	recheckBatch     = 1_000
)

// aRow is one authority row of a chunk with the outbox state of its
// current version.
type aRow struct {
	k        key
	version  int64
	judged   bool
	outbox   OutboxState
	obJudged bool
}

// tRow is one target row.
type tRow struct {
	k       key
	version int64
}

// candidate is a key the chunk scan classified as a gap, before the
// re-check.
type candidate struct {
	k     key
	kinds []Kind
}

// runner performs one run of one job.
type runner struct {
	p        *plan
	w        *window
	kt       keyType
	sortKeys bool
	res      *Result
	max      int

	chunkRows, minRows, maxRows int
	chunkTime                   time.Duration
	// aBuf and tBuf are reused by every chunk, so that a sweep allocates
	// its row buffers once.
	aBuf  []aRow
	tBuf  []tRow
	hooks hooks
	// leafRows is the most rows a differing range may hold to be read row
	// by row rather than split, and the rows a bucket is cut for at first;
	// bucketRows is what buckets are cut for now (checksum.go).
	leafRows, bucketRows int
	// stream makes runs stream every row instead of comparing range
	// summaries.
	stream bool
	// summaries is true when the key types allow range summaries.
	summaries bool
	// outboxMode is how range summaries read the outbox (checksum.go).
	outboxMode outboxSummary
}

// hooks let tests write while a run is in progress.
type hooks struct {
	// afterChunk, when set, runs between chunks.
	afterChunk func(chunk int)
	// betweenSides, when set, runs after a chunk's authority page was read
	// and before its target range is, and makes the target range and the
	// next authority page be read one after the other.
	betweenSides func(chunk int)
	// onRun, when set, runs as a run starts (true) and ends (false).
	onRun func(start bool)
}

func (r *runner) run(ctx context.Context) error {
	if r.hooks.onRun != nil {
		r.hooks.onRun(true)
		defer r.hooks.onRun(false)
	}
	if err := r.p.authority.QueryRow(ctx, "SELECT now()").Scan(&r.w.now); err != nil {
		return fmt.Errorf("read the authority database's clock: %w", err)
	}
	r.w.cut = r.w.now.Add(-r.p.job.Grace)
	r.w.from = r.w.now.Add(-r.p.job.Window)
	if err := r.detectKeys(ctx); err != nil {
		return err
	}

	summarise := r.summaries && !r.stream
	if r.w.full && summarise {
		lo, hi, ok, err := r.fullKeyRange(ctx)
		if err != nil || !ok {
			return err
		}
		return r.walkChecksum(ctx, lo, hi)
	}
	var lo, limit bound
	if !r.w.full {
		var kmin, kmax key
		found, err := r.windowKeys(ctx, &kmin, &kmax)
		if err != nil {
			return err
		}
		if !found {
			return nil
		}
		if summarise {
			pmin, err := r.position(kmin)
			if err != nil {
				return fmt.Errorf("find the window's key range: %w", err)
			}
			pmax, err := r.position(kmax)
			if err != nil {
				return fmt.Errorf("find the window's key range: %w", err)
			}
			return r.walkChecksum(ctx, pmin, pmax)
		}
		lo = bound{set: true, inclusive: true, k: kmin}
		limit = bound{set: true, inclusive: true, k: kmax}
	}
	return r.walk(ctx, lo, limit)
}

// walk compares the key range (lo, limit] chunk by chunk. A chunk is a
// page of the authority (joined with the outbox) of chunkRows keys after
// lo; its last key hi bounds the target's range (lo, hi]. The target's
// range of one chunk is read together with the authority's next page, so
// both databases work at once and the target is always read after the
// authority rows it is compared with.
func (r *runner) walk(ctx context.Context, lo, limit bound) error {
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
		var (
			ts           []tRow
			next         []aRow
			nextRows     = r.chunkRows
			aTook, tTook time.Duration
		)
		readTarget := func(ctx context.Context) error {
			if r.p.target == nil {
				return nil
			}
			t := time.Now()
			var err error
			ts, err = r.fetchTarget(ctx, lo, hi)
			tTook = time.Since(t)
			return err
		}
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
		if h := r.hooks.betweenSides; h != nil || r.p.target == r.p.authority {
			// With the target in the authority's database, one session at a
			// time leaves the pool's other sessions to the collectors.
			if h != nil {
				h(chunk)
			}
			if err := readTarget(ctx); err != nil {
				return err
			}
			if err := readNext(ctx); err != nil {
				return err
			}
		} else {
			g, gctx := errgroup.WithContext(ctx)
			g.Go(func() error { return readTarget(gctx) })
			g.Go(func() error { return readNext(gctx) })
			if err := g.Wait(); err != nil {
				return err
			}
		}
		if !last {
			bufs[(chunk+1)%2] = next
		}
		r.tBuf = ts
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
	}
}

// detectKeys reads the key columns' types.
func (r *runner) detectKeys(ctx context.Context) error {
	kt, err := columnType(ctx, r.p.authority.Query, "SELECT "+r.p.aKey+" FROM "+r.p.aTable+" LIMIT 0")
	if err != nil {
		return fmt.Errorf("read authority key type: %w", err)
	}
	r.kt = kt
	r.sortKeys = kt == keyText
	// Range summaries need keys cut by arithmetic, of one type on both
	// sides (checksum.go).
	r.summaries = kt != keyText
	if r.p.target == nil {
		return nil
	}
	tt, err := columnType(ctx, r.p.target.Query, "SELECT "+r.p.tKey+" FROM "+r.p.tTable+" LIMIT 0")
	if err != nil {
		return fmt.Errorf("read target key type: %w", err)
	}
	if (tt == keyInt) != (kt == keyInt) {
		return fmt.Errorf("authority and target keys cannot be compared: one is an integer, the other is not")
	}
	if tt == keyText {
		r.sortKeys = true
	}
	if tt != kt {
		r.summaries = false
	}
	return nil
}

type queryFunc func(ctx context.Context, sql string, args ...any) (pgx.Rows, error)

func columnType(ctx context.Context, query queryFunc, sql string) (keyType, error) {
	rows, err := query(ctx, sql)
	if err != nil {
		return 0, err
	}
	fds := rows.FieldDescriptions()
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	return keyTypeOf(fds[0].DataTypeOID)
}

func (r *runner) windowKeys(ctx context.Context, kmin, kmax *key) (bool, error) {
	q, args := r.p.windowKeysQuery(r.w, r.kt)
	rows, err := r.p.authority.Query(ctx, q, args...)
	if err != nil {
		return false, fmt.Errorf("find the window's key range: %w", err)
	}
	defer rows.Close()
	found := false
	for rows.Next() {
		raw := rows.RawValues()
		if raw[0] == nil {
			break
		}
		fds := rows.FieldDescriptions()
		if *kmin, err = decodeKey(r.kt, fds[0], raw[0]); err != nil {
			return false, fmt.Errorf("find the window's key range: %w", err)
		}
		if *kmax, err = decodeKey(r.kt, fds[1], raw[1]); err != nil {
			return false, fmt.Errorf("find the window's key range: %w", err)
		}
		found = true
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("find the window's key range: %w", err)
	}
	return found, nil
}

// compare merges one chunk's sides, re-checks what looks like a gap, and
// records what the re-check confirms.
func (r *runner) compare(ctx context.Context, as []aRow, ts []tRow) error {
	if r.sortKeys {
		slices.SortStableFunc(as, func(x, y aRow) int { return compareKeys(x.k, y.k) })
		slices.SortStableFunc(ts, func(x, y tRow) int { return compareKeys(x.k, y.k) })
	}
	r.res.RowsRead += int64(len(as) + len(ts))
	cands := r.merge(as, ts)
	for len(cands) > 0 {
		n := min(len(cands), recheckBatch)
		if err := r.recheck(ctx, cands[:n]); err != nil {
			return err
		}
		cands = cands[n:]
	}
	return nil
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

// fetchAuthority reads one chunk of the authority joined with the outbox
// in one read-only transaction whose plan is a merge join of two index
// ranges: a hash join of the same query spills to disk on large ranges,
// and parallel workers would only add processes to a background job.
func (r *runner) fetchAuthority(ctx context.Context, lo, limit bound, n int, buf []aRow) ([]aRow, error) {
	q, args := r.p.chunkQuery(r.w, lo, limit, n, r.kt)
	out, err := r.queryAuthority(ctx, q, args, buf)
	if err != nil {
		return nil, fmt.Errorf("read authority chunk: %w", err)
	}
	return out, nil
}

// queryAuthority runs an authority query (joined with the outbox) in a
// read-only transaction with the merge-plan settings and decodes its rows
// into buf.
func (r *runner) queryAuthority(ctx context.Context, q string, args []any, buf []aRow) ([]aRow, error) {
	var out []aRow
	err := pgx.BeginTxFunc(ctx, r.p.authority, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, mergePlanSettings); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, q, prepared(args)...)
		if err != nil {
			return err
		}
		out, err = r.scanAuthority(rows, buf)
		return err
	})
	return out, err
}

// mergePlanSettings make a chunk's join a merge join of index scans, in
// this process only: no hash join (whose plan spilled to disk on large
// ranges), no nested loop, no parallel workers, no JIT compilation (which
// costs more than a chunk's query saves).
const mergePlanSettings = "SET LOCAL enable_hashjoin = off; SET LOCAL enable_nestloop = off; SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL jit = off; SET LOCAL plan_cache_mode = force_generic_plan"

// prepared runs a chunk's query as a prepared statement, cached on the
// session: a sweep runs the same few statements hundreds of times, and
// planning each anew cost the server more than executing it.
func prepared(args []any) []any {
	return append([]any{pgx.QueryExecModeCacheStatement}, args...)
}

// scanAuthority decodes authority rows from their raw values: the
// columns are few and fixed, and this is the hot loop of a sweep.
func (r *runner) scanAuthority(rows pgx.Rows, out []aRow) ([]aRow, error) {
	defer rows.Close()
	fds := rows.FieldDescriptions()
	for rows.Next() {
		raw := rows.RawValues()
		k, err := decodeKey(r.kt, fds[0], raw[0])
		if err != nil {
			return nil, fmt.Errorf("authority key: %w", err)
		}
		packed, err := decodeInt(fds[1], raw[1])
		if err != nil {
			return nil, fmt.Errorf("authority version of key %s (the version column must be an integer): %w", k.render(r.kt), err)
		}
		row := aRow{k: k}
		row.version, row.judged, row.outbox, row.obJudged = unpack(packed)
		// Several outbox rows for one key and version come as several
		// rows; keep one, the most advanced state.
		if n := len(out); n > 0 && out[n-1].k == k {
			if rank(row.outbox) > rank(out[n-1].outbox) {
				out[n-1].outbox, out[n-1].obJudged = row.outbox, row.obJudged
			}
			continue
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

// rank orders outbox states of duplicate rows: published wins, then dead.
func rank(s OutboxState) int {
	switch s {
	case OutboxPublished:
		return 3
	case OutboxDead:
		return 2
	case OutboxUnpublished:
		return 1
	}
	return 0
}

func (r *runner) fetchTarget(ctx context.Context, lo, hi bound) ([]tRow, error) {
	q, args := r.p.targetChunkQuery(lo, hi, r.kt)
	out, err := r.queryTarget(ctx, q, args)
	if err != nil {
		return nil, fmt.Errorf("read target chunk: %w", err)
	}
	return out, nil
}

// queryTarget runs a target query and decodes its rows into the reused
// target buffer.
func (r *runner) queryTarget(ctx context.Context, q string, args []any) ([]tRow, error) {
	rows, err := r.p.target.Query(ctx, q, prepared(args)...)
	if err != nil {
		return nil, err
	}
	out, err := r.scanTarget(rows, r.tBuf[:0])
	if err != nil {
		return nil, err
	}
	r.tBuf = out
	return out, nil
}

func (r *runner) scanTarget(rows pgx.Rows, out []tRow) ([]tRow, error) {
	defer rows.Close()
	fds := rows.FieldDescriptions()
	for rows.Next() {
		raw := rows.RawValues()
		k, err := decodeKey(r.kt, fds[0], raw[0])
		if err != nil {
			return nil, fmt.Errorf("target key: %w", err)
		}
		v, err := decodeInt(fds[1], raw[1])
		if err != nil {
			return nil, fmt.Errorf("target version of key %s (the version column must be an integer): %w", k.render(r.kt), err)
		}
		// A target without a unique key may hold a key twice: keep the
		// highest version.
		if n := len(out); n > 0 && out[n-1].k == k {
			out[n-1].version = max(out[n-1].version, v)
			continue
		}
		out = append(out, tRow{k: k, version: v})
	}
	return out, rows.Err()
}

// observe builds the observation of one key from what each side holds.
func (r *runner) observe(a *aRow, t *tRow) Observation {
	o := Observation{HasTarget: r.p.target != nil, DeleteOnPublish: r.p.deleteOnPublish}
	if a != nil {
		o.InAuthority, o.Version, o.Judged = true, a.version, a.judged
		o.Outbox, o.OutboxJudged = a.outbox, a.obJudged
	}
	if t != nil {
		o.InTarget, o.TargetVersion = true, t.version
	}
	return o
}

// merge walks both sorted sides of a chunk and returns the keys that look
// like gaps; it counts the judged authority rows.
func (r *runner) merge(as []aRow, ts []tRow) []candidate {
	var out []candidate
	i, j := 0, 0
	for i < len(as) || j < len(ts) {
		var a *aRow
		var t *tRow
		switch {
		case j >= len(ts):
			a = &as[i]
		case i >= len(as):
			t = &ts[j]
		default:
			switch c := compareKeys(as[i].k, ts[j].k); {
			case c < 0:
				a = &as[i]
			case c > 0:
				t = &ts[j]
			default:
				a, t = &as[i], &ts[j]
			}
		}
		var k key
		if a != nil {
			k = a.k
			i++
			if a.judged {
				r.res.RowsChecked++
			}
		}
		if t != nil {
			k = t.k
			j++
		}
		if kinds := Classify(r.observe(a, t)); len(kinds) > 0 {
			out = append(out, candidate{k: k, kinds: kinds})
		}
	}
	return out
}

// recheck reads the candidates again, each side by point look-up, and
// records the gaps that still hold. Chunks are read in separate snapshots,
// so a row committed during the run can look like a gap; reading again in
// pipeline order decides. The target is read first for orphans (any
// authority row that produced it is committed by the time the authority is
// read after it), and read last for missing and stale targets (any target
// row for the authority's version is then visible).
func (r *runner) recheck(ctx context.Context, cands []candidate) error {
	r.res.Rechecked += int64(len(cands))
	keys := r.keyArgs(cands)
	var t1, t2 map[key]tRow
	var err error
	if r.p.target != nil {
		if t1, err = r.lookupTarget(ctx, keys); err != nil {
			return err
		}
	}
	as, err := r.lookupAuthority(ctx, keys)
	if err != nil {
		return err
	}
	if r.p.target != nil {
		if t2, err = r.lookupTarget(ctx, keys); err != nil {
			return err
		}
	}
	for _, c := range cands {
		var a *aRow
		if row, ok := as[c.k]; ok {
			a = &row
		}
		before := r.observe(a, lookup(t1, c.k))
		after := r.observe(a, lookup(t2, c.k))
		orphan := slices.Contains(Classify(before), OrphanTarget)
		for _, kind := range c.kinds {
			obs := after
			holds := false
			if kind == OrphanTarget {
				obs, holds = before, orphan
			} else {
				holds = slices.Contains(Classify(after), kind)
			}
			if holds {
				r.record(c.k, kind, obs)
			}
		}
	}
	return nil
}

func lookup(m map[key]tRow, k key) *tRow {
	if t, ok := m[k]; ok {
		return &t
	}
	return nil
}

func (r *runner) keyArgs(cands []candidate) any {
	if r.kt == keyInt {
		ks := make([]int64, len(cands))
		for i, c := range cands {
			ks[i] = c.k.i
		}
		return ks
	}
	ks := make([]string, len(cands))
	for i, c := range cands {
		ks[i] = c.k.s
	}
	return ks
}

func (r *runner) lookupAuthority(ctx context.Context, keys any) (map[key]aRow, error) {
	q, args := r.p.authorityLookup(r.w, keys)
	rows, err := r.p.authority.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("re-check authority rows: %w", err)
	}
	list, err := r.scanAuthority(rows, nil)
	if err != nil {
		return nil, fmt.Errorf("re-check authority rows: %w", err)
	}
	m := make(map[key]aRow, len(list))
	for _, a := range list {
		if prev, ok := m[a.k]; ok && rank(prev.outbox) >= rank(a.outbox) {
			continue
		}
		m[a.k] = a
	}
	return m, nil
}

func (r *runner) lookupTarget(ctx context.Context, keys any) (map[key]tRow, error) {
	q, args := r.p.targetLookup(keys)
	rows, err := r.p.target.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("re-check target rows: %w", err)
	}
	list, err := r.scanTarget(rows, nil)
	if err != nil {
		return nil, fmt.Errorf("re-check target rows: %w", err)
	}
	m := make(map[key]tRow, len(list))
	for _, t := range list {
		if prev, ok := m[t.k]; ok && prev.version >= t.version {
			continue
		}
		m[t.k] = t
	}
	return m, nil
}

// record counts a confirmed gap and keeps its finding while under the cap.
func (r *runner) record(k key, kind Kind, o Observation) {
	r.res.Gaps[kind]++
	if r.res.kept[kind] >= r.max {
		r.res.Truncated = true
		return
	}
	r.res.kept[kind]++
	f := Finding{Key: k.render(r.kt), Kind: kind, OutboxState: o.Outbox.String()}
	if o.InAuthority {
		v := o.Version
		f.AuthorityVersion = &v
	}
	if o.InTarget {
		v := o.TargetVersion
		f.TargetVersion = &v
	}
	r.res.Findings = append(r.res.Findings, f)
}

// errBusy is returned by Run while a run of the same job is in progress.
var errBusy = errors.New("a run of this job is already in progress")
