package reconcile

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// plan is one job's queries and pools, built once from the configuration.
// Every identifier is quoted with pg.Table/pg.Ident; only key, version,
// created_at, updated_at and outbox state columns are ever selected, never
// a body.
type plan struct {
	name string
	job  *config.ReconcileJob

	authority *pgxpool.Pool
	target    *pgxpool.Pool // nil without a target

	aTable, aKey, aVersion, aCreated string
	// aUpdated is the authority's updated_at column, "" without one.
	aUpdated string

	hasOutbox       bool
	deleteOnPublish bool
	// outboxRel is the outbox as a subquery yielding k, v, st and pub,
	// the time of publication (NULL where no column dates it).
	outboxRel string
	// pubDated is true when the outbox has a published_at column.
	pubDated bool

	tTable, tKey, tVersion string
}

func newPlan(name string, job *config.ReconcileJob, cfg *config.Config, pools map[string]*pgxpool.Pool) (*plan, error) {
	p := &plan{
		name:     name,
		job:      job,
		aTable:   pg.Table(job.Authority.Table),
		aKey:     pg.Ident(job.Authority.Key),
		aVersion: pg.Ident(job.Authority.Version),
		aCreated: pg.Ident(job.Authority.CreatedAt),
	}
	if job.Authority.UpdatedAt != "" {
		p.aUpdated = pg.Ident(job.Authority.UpdatedAt)
	}
	var ok bool
	if p.authority, ok = pools[job.Authority.Database]; !ok || p.authority == nil {
		return nil, fmt.Errorf("reconcile job %s: no pool for authority database %q", name, job.Authority.Database)
	}
	if job.Outbox != nil {
		ob, ok := cfg.Outboxes[job.Outbox.Name]
		if !ok {
			return nil, fmt.Errorf("reconcile job %s: outbox %q is not configured", name, job.Outbox.Name)
		}
		// A transactional outbox lives in the authority's database: that is
		// what makes the pair commit together, and what lets one merge-plan
		// query compare them.
		if ob.Database != job.Authority.Database {
			return nil, fmt.Errorf("reconcile job %s: outbox %q is in database %q, the authority in %q: a transactional outbox must share the authority's database", name, job.Outbox.Name, ob.Database, job.Authority.Database)
		}
		p.hasOutbox = true
		p.deleteOnPublish = ob.Style() == config.StyleDeleteOnPublish
		// The outbox's filter limits what the collector counts; a row it
		// leaves out is still the event of its version, so reconcile reads
		// every row: applying the filter here made those versions look as
		// if their outbox row were missing.
		pub := "NULL::timestamptz"
		if ob.PublishedAt != "" {
			pub, p.pubDated = pg.Ident(ob.PublishedAt), true
		}
		p.outboxRel = fmt.Sprintf("(SELECT %s AS k, %s AS v, %s AS st, %s AS pub FROM %s)",
			pg.Ident(job.Outbox.Key), pg.Ident(job.Outbox.Version), stateExpr(ob), pub, pg.Table(ob.Table))
	}
	if job.Target != nil {
		if p.target, ok = pools[job.Target.Database]; !ok || p.target == nil {
			return nil, fmt.Errorf("reconcile job %s: no pool for target database %q", name, job.Target.Database)
		}
		p.tTable = pg.Table(job.Target.Table)
		p.tKey = pg.Ident(job.Target.Key)
		p.tVersion = pg.Ident(job.Target.Version)
	}
	return p, nil
}

// stateExpr is an SQL expression giving an outbox row's OutboxState as an
// integer, by the outbox collector's state rules (outbox.ClassExpr). A
// status listed nowhere counts as unpublished: no target gap is judged
// for it.
func stateExpr(ob *config.Outbox) string {
	return outbox.ClassExpr(ob, "", outbox.ClassValues{
		outbox.ClassUnpublished: int(OutboxUnpublished),
		outbox.ClassPublished:   int(OutboxPublished),
		outbox.ClassDead:        int(OutboxDead),
		outbox.ClassIgnored:     int(OutboxUnpublished),
	})
}

// args numbers query arguments.
type args struct{ vals []any }

func (a *args) add(v any) string {
	a.vals = append(a.vals, v)
	return fmt.Sprintf("$%d", len(a.vals))
}

// rangeCond is the SQL condition col in (lo, hi].
func rangeCond(col string, lo, hi bound, kt keyType, a *args) string {
	var c []string
	if lo.set {
		op := " > "
		if lo.inclusive {
			op = " >= "
		}
		c = append(c, col+op+a.add(lo.k.arg(kt))+intCast(kt))
	}
	if hi.set {
		c = append(c, col+" <= "+a.add(hi.k.arg(kt))+intCast(kt))
	}
	if len(c) == 0 {
		return "true"
	}
	return strings.Join(c, " AND ")
}

// intCast types an integer key argument as bigint: a bound taken from a
// bigint side may not fit the other side's integer column.
func intCast(kt keyType) string {
	if kt == keyInt {
		return "::int8"
	}
	return ""
}

// judgedExpr is true for authority rows old enough to judge (created,
// and updated where the authority dates updates, before the cut) and, for
// a windowed run, created within the window. q prefixes the columns.
func (p *plan) judgedExpr(q string, cut, from string) string {
	e := q + p.aCreated + " < " + cut
	if p.aUpdated != "" {
		e += " AND (" + q + p.aUpdated + " IS NULL OR " + q + p.aUpdated + " < " + cut + ")"
	}
	if from != "" {
		e += " AND " + q + p.aCreated + " >= " + from
	}
	return "(" + e + ")"
}

// Publication dates, as selectList's last column gives them.
const (
	pubYoung   = 0 // published within grace
	pubOld     = 1 // published before the cut
	pubUndated = 2 // no column dates it: confirmed by persistence
)

// selectList is the authority's select list: key, version, judged and,
// with an outbox, the state of the outbox row of the version and when it
// was published (pubYoung, pubOld, pubUndated). Each is a column of its
// own: the rows read one by one are few, and packing them into one
// integer tied the SQL to a Go bit layout that large versions overflowed.
func (p *plan) selectList(w *window, a *args) string {
	cut, from := a.add(w.cut), ""
	if !w.full {
		from = a.add(w.from)
	}
	q := "SELECT a." + p.aKey + ", a." + p.aVersion + ", " + p.judgedExpr("a.", cut, from)
	if p.hasOutbox {
		q += fmt.Sprintf(", coalesce(o.st, %d), CASE WHEN o.pub IS NULL THEN %d WHEN o.pub < %s THEN %d ELSE %d END",
			int(OutboxAbsent), pubUndated, cut, pubOld, pubYoung)
	}
	return q
}

// outboxJoin joins an outbox row to the authority row of its key and
// version, NULL versions matching each other: a NULL is compared as a
// value. The key equality is what the merge join runs on.
func (p *plan) outboxJoin() string {
	return " LEFT JOIN " + p.outboxRel + " o ON o.k = a." + p.aKey + " AND (o.v = a." + p.aVersion + " OR (o.v IS NULL AND a." + p.aVersion + " IS NULL))"
}

// authoritySelect is the select list and joins of the point look-up.
func (p *plan) authoritySelect(w *window, a *args) string {
	q := p.selectList(w, a)
	if !p.hasOutbox {
		return q + " FROM " + p.aTable + " a"
	}
	return q + " FROM " + p.aTable + " a" + p.outboxJoin()
}

// chunkQuery reads the next n authority keys after lo (up to limit),
// each joined with the outbox row of its version, in key order. The plan
// is a merge left join of two index scans starting at lo: the outbox scan
// carries the same lower bound, and the join ends when the page of
// authority rows does.
func (p *plan) chunkQuery(w *window, lo, limit bound, n int, kt keyType) (string, []any) {
	a := &args{}
	cols := p.aKey + ", " + p.aVersion + ", " + p.aCreated
	if p.aUpdated != "" {
		cols += ", " + p.aUpdated
	}
	page := "SELECT " + cols + " FROM " + p.aTable +
		" WHERE " + rangeCond(p.aKey, lo, limit, kt, a) + " ORDER BY " + p.aKey + " LIMIT " + a.add(n)
	q := p.selectList(w, a)
	if !p.hasOutbox {
		return q + " FROM (" + page + ") a ORDER BY a." + p.aKey, a.vals
	}
	q += " FROM (" + page + ") a" + p.outboxJoin() + " AND " + rangeCond("o.k", lo, limit, kt, a) + " ORDER BY a." + p.aKey
	return q, a.vals
}

// windowKeysQuery finds the key range of the authority rows a windowed
// run judges, in one pass over the created_at index range: min and max of
// the keys (of their text in C order for uuid keys, which have no min and
// max but whose text sorts as they do). OFFSET 0 keeps the planner from
// answering min and max by walking the key index from each end, which
// filters every row outside the window on the way (1 s against 10 ms on
// the benchmark's 10M rows).
func (p *plan) windowKeysQuery(w *window, kt keyType) (string, []any) {
	keys := "(SELECT " + p.aKey + " AS k FROM " + p.aTable + " WHERE " + p.aCreated + " >= $1 AND " + p.aCreated + " < $2 OFFSET 0) w"
	if kt == keyUUID {
		return `SELECT min(k::text COLLATE "C")::uuid, max(k::text COLLATE "C")::uuid FROM ` + keys, []any{w.from, w.cut}
	}
	return "SELECT min(k), max(k) FROM " + keys, []any{w.from, w.cut}
}

func (p *plan) targetChunkQuery(lo, hi bound, kt keyType) (string, []any) {
	a := &args{}
	q := "SELECT " + p.tKey + ", " + p.tVersion + " FROM " + p.tTable + " WHERE " + rangeCond(p.tKey, lo, hi, kt, a) +
		" ORDER BY " + p.tKey
	return q, a.vals
}

// authorityLookup re-reads the authority (and outbox) rows of some keys.
func (p *plan) authorityLookup(w *window, keys any) (string, []any) {
	a := &args{}
	q := p.authoritySelect(w, a)
	cast := ""
	if _, ok := keys.([]int64); ok {
		cast = "::int8[]"
	}
	q += " WHERE a." + p.aKey + " = ANY(" + a.add(keys) + cast + ")"
	return q, a.vals
}

func (p *plan) targetLookup(keys any) (string, []any) {
	cast := ""
	if _, ok := keys.([]int64); ok {
		cast = "::int8[]"
	}
	return "SELECT " + p.tKey + ", " + p.tVersion + " FROM " + p.tTable + " WHERE " + p.tKey + " = ANY($1" + cast + ")", []any{keys}
}

// rowHash is a 64-bit hash of one (key, version) pair that depends on
// every bit of both. hashint8extended folds a bigint's halves into 32 bits
// before hashing (1 and 4294967296 hash alike), so an integer key goes in
// whole as the seed of hashint4extended over the version's high half, and
// that hash is the seed of hashint4extended over its low half: two
// distinct pairs collide only by a collision of the 64-bit hash. A uuid
// key is hashed whole by uuid_hash_extended with the version as seed. A
// NULL version hashes the key's text by another function, so it is a
// value of its own rather than nothing. These are the hash functions of
// hash partitioning: stable across platforms and releases, so two
// servers agree.
func rowHash(kt keyType, k, v string) string {
	h := "uuid_hash_extended(" + k + ", " + v + "::int8)"
	if kt == keyInt {
		v8 := "(" + v + ")::int8"
		h = "hashint4extended(((" + v8 + " & 4294967295) - 2147483648)::int4, hashint4extended((" + v8 + " >> 32)::int4, " + k + "::int8))"
	}
	return "coalesce(" + h + ", hashtextextended(" + k + "::text, 1))"
}

// hashSum is the sum of rowHash over a summary's rows, as text (a
// numeric: it does not fit an int8), 0 for none. Two different sets of
// rows with the same count have the same sum with probability at most
// 2^-64 (README).
func hashSum(kt keyType, k, v string) string {
	return "coalesce(sum(" + rowHash(kt, k, v) + "), 0)::text"
}

// bucketsFrom is the FROM item of a summary query: the buckets given as
// two arrays of inclusive bounds ($1, $2), numbered from 1.
func bucketsFrom(kt keyType) string {
	t := "int8[]"
	if kt == keyUUID {
		t = "uuid[]"
	}
	return " FROM unnest($1::" + t + ", $2::" + t + ") WITH ORDINALITY AS b(lo, hi, i)"
}

// outboxSummary says how a summary query reads the outbox.
type outboxSummary int

const (
	// outboxSkip: not at all (no outbox, or one that deletes rows on
	// publish, where an absent row is no gap).
	outboxSkip outboxSummary = iota
	// outboxAllRows: every row, the cheaper form.
	outboxAllRows
	// outboxLatest: one row per key, its highest version: what an outbox
	// that keeps the rows of earlier versions is compared by.
	outboxLatest
)

// outboxLateral is the LATERAL summary of a bucket's outbox rows.
func (p *plan) outboxLateral(mode outboxSummary, kt keyType) string {
	if mode == outboxLatest {
		return " CROSS JOIN LATERAL (SELECT count(*) AS n, " + hashSum(kt, "g.k", "g.v") +
			" AS s FROM (SELECT o.k, max(o.v) AS v FROM " + p.outboxRel + " o WHERE o.k >= b.lo AND o.k <= b.hi GROUP BY o.k) g) o"
	}
	return " CROSS JOIN LATERAL (SELECT count(*) AS n, " + hashSum(kt, "o.k", "o.v") + " AS s FROM " + p.outboxRel +
		" o WHERE o.k >= b.lo AND o.k <= b.hi) o"
}

// authorityBucketQuery summarises each bucket's authority rows: the count,
// the rows created before the cut ($3) and, windowed, at or after the
// window's start ($4): the judged ones; the hash sum; and unless
// outboxSkip, the count and hash sum of its outbox rows. Each bucket's
// aggregate reads one index range.
func (p *plan) authorityBucketQuery(mode outboxSummary, kt keyType, windowed bool) string {
	from4 := ""
	if windowed {
		from4 = "$4"
	}
	judged := p.judgedExpr("x.", "$3", from4)
	q := "SELECT b.i, a.n, a.judged, a.s"
	from := bucketsFrom(kt) + " CROSS JOIN LATERAL (SELECT count(*) AS n, count(*) FILTER (WHERE " + judged + ") AS judged, " +
		hashSum(kt, "x."+p.aKey, "x."+p.aVersion) + " AS s FROM " + p.aTable + " x WHERE x." + p.aKey + " >= b.lo AND x." + p.aKey + " <= b.hi) a"
	if mode != outboxSkip {
		q += ", o.n, o.s"
		from += p.outboxLateral(mode, kt)
	}
	return q + from
}

// outboxLatestQuery summarises each bucket's outbox with one row per key,
// its highest version.
func (p *plan) outboxLatestQuery(kt keyType) string {
	return "SELECT b.i, o.n, o.s" + bucketsFrom(kt) + p.outboxLateral(outboxLatest, kt)
}

// targetBucketQuery summarises each bucket's target rows.
func (p *plan) targetBucketQuery(kt keyType) string {
	return "SELECT b.i, t.n, t.s" + bucketsFrom(kt) + " CROSS JOIN LATERAL (SELECT count(*) AS n, " + hashSum(kt, "x."+p.tKey, "x."+p.tVersion) +
		" AS s FROM " + p.tTable + " x WHERE x." + p.tKey + " >= b.lo AND x." + p.tKey + " <= b.hi) t"
}

// authorityRangesQuery reads the authority rows, each joined with the
// outbox row of its version, of the key ranges los[i]..his[i], in key
// order: per range, a merge join of two bounded index ranges, as a chunk.
func (p *plan) authorityRangesQuery(w *window, kt keyType, los, his any) (string, []any) {
	a := &args{vals: []any{los, his}}
	q := p.selectList(w, a) + " FROM " + p.aTable + " a"
	if p.hasOutbox {
		q += p.outboxJoin() + " AND o.k >= b.lo AND o.k <= b.hi"
	}
	// OFFSET 0 keeps the subquery a subquery: flattened into the outer
	// query, its generic plan scanned the whole index once with the ranges
	// as a join filter (7.5 s for a few hundred short ranges of 10M rows).
	q += " WHERE a." + p.aKey + " >= b.lo AND a." + p.aKey + " <= b.hi OFFSET 0"
	return "SELECT x.*" + bucketsFrom(kt) + " CROSS JOIN LATERAL (" + q + ") x ORDER BY 1", a.vals
}

// targetRangesQuery reads the target rows of the key ranges $1[i]..$2[i],
// in key order.
func (p *plan) targetRangesQuery(kt keyType) string {
	return "SELECT x.*" + bucketsFrom(kt) + " CROSS JOIN LATERAL (SELECT " + p.tKey + ", " + p.tVersion + " FROM " + p.tTable +
		" WHERE " + p.tKey + " >= b.lo AND " + p.tKey + " <= b.hi OFFSET 0) x ORDER BY 1"
}

// keyRangeQuery finds the smallest and largest key of a table, as text
// (by ORDER BY, as uuid has no min/max aggregate).
func keyRangeQuery(table, key string) string {
	return "SELECT (SELECT " + key + " FROM " + table + " ORDER BY 1 LIMIT 1)::text, (SELECT " + key + " FROM " + table + " ORDER BY 1 DESC LIMIT 1)::text"
}
