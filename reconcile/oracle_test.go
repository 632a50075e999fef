package reconcile

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

var (
	oracleSeeds = flag.Int("seeds", 0, "TestOracle: run seeds 1..N instead of the CI set")
	oracleSeed  = flag.Uint64("seed", 0, "TestOracle: run this seed alone")
)

// ciSeeds is how many generated states CI runs; regressionSeeds are
// seeds that once found a fault, run every time.
const ciSeeds = 40

var regressionSeeds = []uint64{}

// TestOracle compares runs over seeded generated states with findings
// computed by brute force: a FULL JOIN of authority and target in SQL
// with the rules as the README states them (oracleQuery), independent of
// Classify. `go test ./reconcile -run TestOracle -seeds 2000` runs more.
func TestOracle(t *testing.T) {
	seeds := slices.Clone(regressionSeeds)
	switch {
	case *oracleSeed != 0:
		seeds = []uint64{*oracleSeed}
	case *oracleSeeds > 0:
		for s := range *oracleSeeds {
			seeds = append(seeds, uint64(s+1))
		}
	default:
		for s := range ciSeeds {
			seeds = append(seeds, uint64(s+1))
		}
	}
	a, b := pgtest.New(t), pgtest.New(t)
	failed := 0
	for _, seed := range seeds {
		c := genCase(seed)
		if !t.Run(fmt.Sprint(seed), func(t *testing.T) { runOracle(t, a, b, c) }) {
			failed++
			if failed >= 5 {
				t.Fatal("five seeds failed; stopping")
			}
		}
	}
	t.Logf("%d seeds, %d failed", len(seeds), failed)
}

func runOracle(t *testing.T, a, b *pgtest.DB, c *ocase) {
	t.Log(c)
	c.load(t, a, b)
	ctx := context.Background()
	s, closePools := oracleScheduler(t, c, a, b)
	defer closePools()
	var stop func() int
	if c.writer {
		w := startOracleWriter(t, c, a, b)
		seen := 0
		// Between the sides of every range, the run waits for two more
		// of the writer's pipelines: a condition, not a time.
		s.jobs["j"].hooks.betweenSides = func(int) {
			seen += 2
			w.waitFor(seen)
		}
		stop = w.stop
	}
	res, err := s.Run(ctx, "j", c.full)
	if stop != nil {
		t.Logf("%d writes during the run", stop())
	}
	if err != nil {
		t.Fatal(err)
	}
	wantLines, wantChecked := c.expected(t, a)
	var got []string
	for _, f := range res.Findings {
		got = append(got, string(f.Kind)+" "+f.Key+" "+versionText(f.AuthorityVersion, f.AuthorityVersionNull))
	}
	sort.Strings(got)
	sameLines(t, c.String(), got, wantLines)
	var total int64
	for _, n := range res.Gaps {
		total += n
	}
	if total != int64(len(wantLines)) {
		t.Errorf("gap counts %v, want %d in all", res.Gaps, len(wantLines))
	}
	if res.RowsChecked != wantChecked {
		t.Errorf("checked %d rows, want %d", res.RowsChecked, wantChecked)
	}
}

// versionText renders an authority version as the oracle does.
func versionText(v *int64, null bool) string {
	switch {
	case null:
		return "NULL"
	case v == nil:
		return "-"
	}
	return fmt.Sprint(*v)
}

// load replaces both databases' tables with the case's state.
func (c *ocase) load(t *testing.T, a, b *pgtest.DB) {
	a.Exec(t, `DROP TABLE IF EXISTS messages, outbox, oracle_target`)
	b.Exec(t, `DROP TABLE IF EXISTS search_index`)
	a.Exec(t, fmt.Sprintf(`CREATE TABLE messages (id %s PRIMARY KEY, version bigint, created_at timestamptz NOT NULL, updated_at timestamptz, body text NOT NULL DEFAULT 'secret')`, c.aType))
	a.Exec(t, `CREATE INDEX ON messages (created_at)`)
	a.Exec(t, fmt.Sprintf(`CREATE TABLE outbox (event_id bigserial PRIMARY KEY, message_id %s NOT NULL, message_version bigint,
		created_at timestamptz NOT NULL DEFAULT now(), status text NOT NULL, published_at timestamptz, blocked boolean NOT NULL)`, c.aType))
	a.Exec(t, `CREATE INDEX ON outbox (message_id, message_version)`)
	tt := c.tType
	a.Exec(t, fmt.Sprintf(`CREATE TABLE oracle_target (message_id %s NOT NULL, version bigint)`, tt))
	b.Exec(t, fmt.Sprintf(`CREATE TABLE search_index (message_id %s NOT NULL, version bigint)`, tt))
	b.Exec(t, `CREATE INDEX ON search_index (message_id)`)

	var ks, os, ts []string
	var vs, ovs, tvs []*int64
	var created []float64
	var updated, pubs []*float64
	var statuses []string
	var blocked []bool
	for _, m := range c.msgs {
		ks, vs, created, updated = append(ks, m.k), append(vs, m.v), append(created, m.created), append(updated, m.updated)
	}
	for _, o := range c.outbox {
		os, ovs, statuses, pubs, blocked = append(os, o.k), append(ovs, o.v), append(statuses, o.status), append(pubs, o.pub), append(blocked, o.blocked)
	}
	for _, x := range c.targets {
		ts, tvs = append(ts, x.k), append(tvs, x.v)
	}
	a.Exec(t, fmt.Sprintf(`INSERT INTO messages (id, version, created_at, updated_at)
		SELECT k::%s, v, now() - c * interval '1 second', now() - u * interval '1 second' FROM unnest($1::text[], $2::int8[], $3::float8[], $4::float8[]) AS x(k, v, c, u)`, c.aType),
		ks, vs, created, updated)
	a.Exec(t, fmt.Sprintf(`INSERT INTO outbox (message_id, message_version, status, published_at, blocked)
		SELECT k::%s, v, s, now() - p * interval '1 second', bl FROM unnest($1::text[], $2::int8[], $3::text[], $4::float8[], $5::bool[]) WITH ORDINALITY AS x(k, v, s, p, bl, i) ORDER BY i`, c.aType),
		os, ovs, statuses, pubs, blocked)
	for _, db := range []struct {
		d     *pgtest.DB
		table string
	}{{a, "oracle_target"}, {b, "search_index"}} {
		db.d.Exec(t, fmt.Sprintf(`INSERT INTO %s SELECT k::%s, v FROM unnest($1::text[], $2::int8[]) AS x(k, v)`, db.table, tt), ts, tvs)
	}
	a.Exec(t, `ANALYZE`)
	b.Exec(t, `ANALYZE`)
}

// yaml is the job's configuration.
func (c *ocase) yaml(a, b *pgtest.DB) string {
	var ob, job strings.Builder
	fmt.Fprintf(&ob, "outboxes:\n  ob:\n    database: main\n    table: public.outbox\n    id: event_id\n    created_at: created_at\n    deadline: 5m\n")
	switch c.style {
	case "status", "status-dated":
		ob.WriteString("    status: status\n    pending: [PENDING]\n    published: [PUBLISHED]\n    dead: [ABANDONED]\n")
		if c.style == "status-dated" {
			ob.WriteString("    published_at: published_at\n")
		}
	case "timestamps":
		ob.WriteString("    published_at: published_at\n")
	}
	if c.filter {
		ob.WriteString("    filter: blocked = false\n")
	}
	if c.style == "dop" || c.style == "none" {
		// A delete-on-publish outbox has neither status nor published_at.
		if c.style == "none" {
			ob.Reset()
		}
	}
	fmt.Fprintf(&job, "reconcile:\n  j:\n    schedule: \"@every 1h\"\n    window: 24h\n    grace: 10m\n    max_findings: 100000\n")
	upd := ""
	if c.updatedAt {
		upd = ", updated_at: updated_at"
	}
	fmt.Fprintf(&job, "    authority: {database: main, table: public.messages, key: id, version: version, created_at: created_at%s}\n", upd)
	if c.style != "none" {
		job.WriteString("    outbox: {name: ob, key: message_id, version: message_version}\n")
	}
	if c.target {
		job.WriteString("    target: {database: search, table: public.search_index, key: message_id, version: version}\n")
	}
	return fmt.Sprintf("databases:\n  main: {dsn: %q, max_connections: 2}\n  search: {dsn: %q, max_connections: 2}\n%s%s", a.URL, b.URL, ob.String(), job.String())
}

// oracleScheduler builds the case's Scheduler on the exporter's own
// read-only pools, closed by the returned function.
func oracleScheduler(t *testing.T, c *ocase, a, b *pgtest.DB) (*Scheduler, func()) {
	t.Helper()
	cfg, err := config.Parse([]byte(c.yaml(a, b)), nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, c.yaml(a, b))
	}
	pools := map[string]*pgxpool.Pool{}
	closeAll := func() {
		for _, p := range pools {
			p.Close()
		}
	}
	for name, db := range cfg.Databases {
		pool, err := pg.Open(context.Background(), db)
		if err != nil {
			closeAll()
			t.Fatal(err)
		}
		pools[name] = pool
	}
	var opts []Option
	if c.stream {
		opts = append(opts, StreamRuns())
	}
	s, err := New(cfg, pools, slog.New(slog.DiscardHandler), opts...)
	if err != nil {
		closeAll()
		t.Fatal(err)
	}
	for _, js := range s.jobs {
		if !c.production {
			js.initRows, js.minRows, js.maxRows, js.leafRows = 7, 3, 11, 2
		}
		// The data do not change during the run: confirming an undated
		// finding after grace reads what the first look read.
		js.confirmInRun = true
		js.hooks.skipWaits = true
	}
	return s, func() { s.Stop(); closeAll() }
}

// expected runs the oracle: every finding as "kind key authority-version"
// and the rows a run judges.
func (c *ocase) expected(t *testing.T, a *pgtest.DB) ([]string, int64) {
	t.Helper()
	ctx := context.Background()
	q, checked := c.oracleQuery()
	rows, err := a.Admin.Query(ctx, q)
	if err != nil {
		t.Fatalf("oracle: %v\n%s", err, q)
	}
	lines, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var kind, k, v string
		err := r.Scan(&kind, &k, &v)
		return kind + " " + k + " " + v, err
	})
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	sort.Strings(lines)
	var n int64
	if err := a.Admin.QueryRow(ctx, checked).Scan(&n); err != nil {
		t.Fatalf("oracle rows checked: %v\n%s", err, checked)
	}
	return lines, n
}

// oracleQuery is the brute-force oracle: authority and target FULL
// JOINed on the key (as text between a uuid and a text side), each key
// classified by the README's rules, written here in SQL; and the count
// of rows a run judges.
func (c *ocase) oracleQuery() (findings, checked string) {
	const cut = "now() - interval '10 minutes'"
	judged := "created_at < " + cut
	if c.updatedAt {
		judged += " AND (updated_at IS NULL OR updated_at < " + cut + ")"
	}
	if !c.full {
		judged += " AND created_at >= now() - interval '24 hours'"
	}
	st, pubok := "1", "true"
	switch c.style {
	case "status", "status-dated":
		st = "CASE status WHEN 'PUBLISHED' THEN 3 WHEN 'ABANDONED' THEN 2 ELSE 1 END"
	case "timestamps":
		st = "CASE WHEN published_at IS NOT NULL THEN 3 ELSE 1 END"
	}
	if c.style == "status-dated" || c.style == "timestamps" {
		// Undated publications are confirmed after grace: judged.
		pubok = "(published_at IS NULL OR published_at < " + cut + ")"
	}
	published := "st = 3 AND pubok"
	switch c.style {
	case "none":
		published = "true"
	case "dop":
		published = "st IS NULL"
	}
	join := "t.k = a.k"
	if c.aType != c.tType && !(c.aType != "text" && c.aType != "uuid" && c.tType != "text" && c.tType != "uuid") {
		join = "t.kt = a.kt"
	}
	inRange := "true"
	if !c.full {
		w := "FROM messages WHERE created_at >= now() - interval '24 hours' AND created_at < " + cut + " ORDER BY id"
		inRange = "coalesce(a.k, t.k) BETWEEN (SELECT id " + w + " LIMIT 1) AND (SELECT id " + w + " DESC LIMIT 1)"
	}
	keptOutbox := c.style != "none" && c.style != "dop"
	findings = `WITH a AS (SELECT id AS k, id::text AS kt, version AS v, (` + judged + `) AS judged FROM messages),
	ob AS (SELECT message_id AS k, message_version AS v, ` + st + ` AS st, ` + pubok + ` AS pubok FROM outbox),
	best AS (SELECT DISTINCT ON (a.k) a.k, ob.st, ob.pubok FROM a JOIN ob ON ob.k = a.k AND ob.v IS NOT DISTINCT FROM a.v ORDER BY a.k, ob.st DESC),
	t AS (SELECT message_id AS k, message_id::text AS kt, count(*) AS n, max(version) AS v FROM oracle_target GROUP BY message_id),
	j AS (SELECT a.k IS NOT NULL AS ina, t.k IS NOT NULL AS intg, coalesce(a.kt, t.kt) AS key,
			CASE WHEN a.k IS NULL THEN '-' ELSE coalesce(a.v::text, 'NULL') END AS avt, a.v AS av, coalesce(a.judged, false) AS judged,
			b.st, coalesce(b.pubok, false) AS pubok, t.n, t.v AS tv
		FROM a LEFT JOIN best b ON b.k = a.k FULL JOIN t ON ` + join + ` WHERE ` + inRange + `),
	c AS (SELECT *, CASE WHEN tv IS NULL AND av IS NULL THEN 0 WHEN tv IS NULL THEN -1 WHEN av IS NULL THEN 1
			WHEN tv > av THEN 1 WHEN tv < av THEN -1 ELSE 0 END AS cmp, coalesce(` + published + `, false) AS published FROM j)
	SELECT 'missing_outbox', key, avt FROM c WHERE ina AND judged AND ` + fmt.Sprint(keptOutbox) + ` AND st IS NULL
	UNION ALL SELECT 'orphan_target', key, avt FROM c WHERE intg AND (NOT ina OR judged AND cmp > 0)
	UNION ALL SELECT 'missing_target', key, avt FROM c WHERE ina AND judged AND ` + fmt.Sprint(c.target) + ` AND NOT intg AND published
	UNION ALL SELECT 'stale_target', key, avt FROM c WHERE ina AND judged AND intg AND cmp < 0 AND published
	UNION ALL SELECT 'duplicate_target', key, avt FROM c WHERE intg AND n > 1`
	checked = "SELECT count(*) FILTER (WHERE " + judged + ") FROM messages"
	return findings, checked
}

// oracleWriter commits during a run in the order of a real pipeline, on
// keys of its own: the authority row with its outbox row (pending) in one
// transaction, then the relay's publish (published now), then the
// consumer's apply to the target; new keys and updates of them. Its rows
// are young, so no finding may come of them; the oracle, run after the
// writer stopped, sees them as they ended.
type oracleWriter struct {
	writeCount
	cancel context.CancelFunc
	done   chan struct{}
}

func startOracleWriter(t *testing.T, c *ocase, a, b *pgtest.DB) *oracleWriter {
	ctx, cancel := context.WithCancel(context.Background())
	w := &oracleWriter{cancel: cancel, done: make(chan struct{})}
	w.init()
	r := rand.New(rand.NewPCG(c.seed, 0x3717e))
	taken := map[string]bool{}
	for _, m := range c.msgs {
		taken[m.k] = true
	}
	for _, x := range c.targets {
		taken[x.k] = true
	}
	var own []string
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			var k string
			if len(own) > 0 && chance(r, 0.5) {
				k = own[r.IntN(len(own))]
			} else {
				k = genKeys(r, c, 1)[0]
				if taken[k] {
					continue
				}
				taken[k] = true
				own = append(own, k)
			}
			err := oracleWrite(ctx, c, a, b, k)
			if ctx.Err() != nil {
				err = nil // cut off by stop: no failure
			}
			w.wrote(err)
		}
	}()
	t.Cleanup(func() {
		if w.err != nil {
			t.Errorf("writer: %v", w.err)
		}
	})
	return w
}

// oracleWrite takes one key through the pipeline: commit, publish,
// consume and apply.
func oracleWrite(ctx context.Context, c *ocase, a, b *pgtest.DB, k string) error {
	var v int64
	err := a.Admin.QueryRow(ctx, fmt.Sprintf(`WITH m AS (INSERT INTO messages (id, version, created_at, updated_at) VALUES ($1::%s, 1, now(), now())
			ON CONFLICT (id) DO UPDATE SET version = messages.version + 1, updated_at = now() RETURNING id, version)
		, o AS (INSERT INTO outbox (message_id, message_version, status, blocked) SELECT id, version, 'PENDING', false FROM m WHERE %v)
		SELECT version FROM m`, c.aType, c.style != "none"), k).Scan(&v)
	if err != nil {
		return err
	}
	if c.style != "none" {
		if _, err := a.Admin.Exec(ctx, fmt.Sprintf(`UPDATE outbox SET status = 'PUBLISHED', published_at = now() WHERE message_id = $1::%s AND message_version = $2`, c.aType), k, v); err != nil {
			return err
		}
	}
	for _, db := range []struct {
		d     *pgtest.DB
		table string
	}{{b, "search_index"}, {a, "oracle_target"}} {
		// The target table has no unique key: replace the key's row.
		if _, err := db.d.Admin.Exec(ctx, fmt.Sprintf(`WITH d AS (DELETE FROM %s WHERE message_id = $1::%s) INSERT INTO %s VALUES ($1::%s, $2)`, db.table, c.tType, db.table, c.tType), k, v); err != nil {
			return err
		}
	}
	return nil
}

// stop ends the writer after its write in progress and says how many it
// made.
func (w *oracleWriter) stop() int {
	w.cancel()
	<-w.done
	return w.writes
}
