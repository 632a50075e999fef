package outbox

// The oracle of the resumed walks: TestOracleOtherExact's states (past
// every cap, the read past the skip-scan filled up), written row by row
// as a database lives (inserts, updates; never rewritten), where after
// the first collection every row of a series with "other" first and a
// value of its own after is published (a backlog draining) while fresh
// rows keep arriving. No read finds a row of that series: it is walked
// on, a bounded number of entries a collection, from where the last
// walk stopped. At each collection every series' oldest age is compared
// with the brute-force one over all the committed rows: exact, or no
// more than it where the sample says the age is a lower bound; and the
// walk must end, after which the drained series is exact. Then a row of
// it is committed late, by a transaction open during a collection, with
// a created_at older than where that collection's walk ended: the next
// collection must read it, exactly.
//
//	go test -run OracleOtherWalk ./collectors/outbox/ -other-seeds 12

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

func TestOracleOtherWalk(t *testing.T) {
	env := newOracleEnv(t)
	runSeeds(t, "OracleOtherWalk", nil, max(*otherSeeds, 3), func(t *testing.T, seed uint64) { runOtherWalkSeed(t, env, seed) })
}

// walkTable writes generated rows as a database lives: each row once,
// then updates of its state; ids are the rows' indexes plus one.
type walkTable struct {
	admin   *pgxpool.Pool
	written int
	pub     map[int]bool
}

// sync sets the clock to now and writes what changed in rows since the
// last call.
func (w *walkTable) sync(ctx context.Context, now time.Time, rows []capsRow) error {
	if _, err := w.admin.Exec(ctx, "UPDATE fakeclock.clock SET t = $1", now); err != nil {
		return err
	}
	var src [][]any
	for i := w.written; i < len(rows); i++ {
		x := rows[i]
		src = append(src, []any{int64(i + 1), x.created, x.et, x.topic, x.status})
	}
	if _, err := w.admin.CopyFrom(ctx, pgx.Identifier{"caps"}, []string{"id", "created_at", "event_type", "topic", "status"}, pgx.CopyFromRows(src)); err != nil {
		return err
	}
	w.written = len(rows)
	var pub, back []int64
	for i, x := range rows {
		switch {
		case x.published && !w.pub[i]:
			pub = append(pub, int64(i+1))
		case !x.published && w.pub[i]:
			back = append(back, int64(i+1))
		}
		w.pub[i] = x.published
	}
	if _, err := w.admin.Exec(ctx, "UPDATE caps SET status = 'PUBLISHED', published_at = $2 WHERE id = ANY($1)", pub, now); err != nil {
		return err
	}
	if _, err := w.admin.Exec(ctx, "UPDATE caps SET status = 'PENDING', published_at = NULL WHERE id = ANY($1)", back); err != nil {
		return err
	}
	_, err := w.admin.Exec(ctx, "ANALYZE caps")
	return err
}

// walkDrainTarget is a kept series with "other" first and a value of its
// own after: read by time, not in a first value's range.
func walkDrainTarget(targets [][]string) []string {
	for _, t := range targets {
		if len(t) == 2 && t[0] == Other && t[1] != Other {
			return t
		}
	}
	return nil
}

// walkCompare compares snap with the oldest age of each series over the
// committed rows, folded as s folds them: exact, or at most it where
// snap says the age is a lower bound. It returns whether drained was
// said to be a lower bound.
func walkCompare(t *testing.T, step int, now time.Time, snap *Snapshot, rows []capsRow, s *Sampler, drained []string) bool {
	t.Helper()
	want := map[string]float64{}
	for _, x := range rows {
		if !x.published {
			k := joinLabels(s.Fold([]string{x.et, x.topic}))
			want[k] = math.Max(want[k], now.Sub(x.created).Seconds())
		}
	}
	bound := map[string]bool{}
	for _, l := range snap.LowerBound {
		bound[joinLabels(l)] = true
	}
	got := map[string]float64{}
	for _, x := range snap.Series {
		got[joinLabels(x.Labels)] = x.OldestAge
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			want[k] = 0
		}
	}
	for k, w := range want {
		g, ok := got[k]
		switch {
		case bound[k] && (!ok || g > w+ageTolerance):
			t.Errorf("step %d: oldest age of %q = %v (present %v), said a lower bound of %v", step, k, g, ok, w)
		case !bound[k] && (!ok || math.Abs(g-w) > ageTolerance):
			t.Errorf("step %d: oldest age of %q = %v (present %v), want %v exactly", step, k, g, ok, w)
		}
	}
	if !snap.Capped {
		t.Errorf("step %d: not capped: the test needs the capped reads", step)
	}
	return bound[joinLabels(drained)]
}

// walkRun is one seed of TestOracleOtherWalk: the generated rows, those
// committed apart (late, which sync does not write), the sampler, the
// drained series and the collection's step.
type walkRun struct {
	t       *testing.T
	ctx     context.Context
	env     *oracleEnv
	g       *otherGen
	w       *walkTable
	s       *Sampler
	rows    []capsRow
	late    []capsRow
	drained []string
	step    int
}

// sample writes the rows, collects and compares; it reports whether the
// drained series was said to be a lower bound.
func (x *walkRun) sample() bool {
	t := x.t
	t.Helper()
	if err := x.w.sync(x.ctx, x.g.now, x.rows); err != nil {
		t.Fatal(err)
	}
	snap, err := x.s.Sample(x.ctx, x.env.pool)
	if err != nil {
		t.Fatalf("step %d: %v", x.step, err)
	}
	b := walkCompare(t, x.step, x.g.now, snap, append(slices.Clip(x.rows), x.late...), x.s, x.drained)
	if t.Failed() {
		t.FailNow()
	}
	return b
}

// advance moves to the next step: the clock on, fresh rows.
func (x *walkRun) advance() {
	x.g.now = x.g.now.Add(time.Duration(5+x.g.r.IntN(60)) * time.Second)
	x.rows = drainNext(x.g, x.rows, x.s, x.drained)
	x.step++
}

// untilExact collects until the drained series is exact, at most within
// collections.
func (x *walkRun) untilExact(what string, within int) {
	x.t.Helper()
	for first := x.step; x.sample(); x.advance() {
		if x.step-first >= within {
			x.t.Fatalf("step %d: %q still a lower bound %d collections after %s", x.step, x.drained, x.step-first, what)
		}
	}
	x.t.Logf("step %d: %q exact (after %s)", x.step, x.drained, what)
}

func runOtherWalkSeed(t *testing.T, env *oracleEnv, seed uint64) {
	g := newOtherGen(seed)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	createCapsTable(ctx, t, env.db.Admin)
	createIndexes(ctx, t, env, g.o)
	x := &walkRun{t: t, ctx: ctx, env: env, g: g, w: &walkTable{admin: env.db.Admin, pub: map[int]bool{}}, s: NewSampler("ob", g.o)}
	x.rows = g.initial()
	// A destination with some of the oldest rows, each of an event type
	// of its own: its series is ("other", "dest.w").
	for i := range g.o.MaxCount/2 + g.r.IntN(g.o.MaxCount/2) {
		x.rows = append(x.rows, capsRow{created: g.now.Add(-time.Duration(4000+g.r.IntN(1000)) * time.Second),
			et: g.value("xw", i), topic: "dest.w", status: "PENDING"})
	}
	x.sample()
	x.drained = []string{Other, "dest.w"}
	if !slices.ContainsFunc(x.s.cap.Targets(), func(v []string) bool { return slices.Equal(v, x.drained) }) {
		x.drained = walkDrainTarget(x.s.cap.Targets())
	}
	if x.drained == nil {
		t.Fatalf("no series with other first and a value of its own among %q", x.s.cap.Targets())
	}
	x.advance()
	n := 0
	for i, r := range x.rows {
		if !r.published && slices.Equal(x.s.Fold([]string{r.et, r.topic}), x.drained) {
			x.rows[i].published, x.rows[i].publishedTime = true, g.now
			n++
		}
	}
	t.Logf("%d rows, max_count %d: drained %q, %d rows published", len(x.rows), g.o.MaxCount, x.drained, n)
	// The walk from where the read past the skip-scan stopped goes on
	// over the collections, to the end.
	x.untilExact("the drain", 60)
	x.lateRow()
	x.replay()
}

// lateRow writes a row of the drained series in a transaction open
// during a collection, committed after it, with a created_at the walk
// passed: the next collection must read it exactly. Published, the
// series is walked on from where its proof ended, a short walk.
func (x *walkRun) lateRow() {
	t, ctx, admin := x.t, x.ctx, x.env.db.Admin
	x.advance()
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	r := capsRow{created: x.g.now.Add(-time.Second), et: "ev.99999", topic: x.drained[1], status: "PENDING"}
	if f := x.s.Fold([]string{r.et, r.topic}); !slices.Equal(f, x.drained) {
		t.Fatalf("%q folds into %q, not %q", []string{r.et, r.topic}, f, x.drained)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO caps (id, created_at, event_type, topic, status) VALUES (1000000, $1, $2, $3, 'PENDING')",
		r.created, r.et, r.topic); err != nil {
		t.Fatal(err)
	}
	x.sample()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	x.late = append(x.late, r)
	x.advance()
	if x.sample() {
		t.Fatalf("step %d: the late row's series %q said a lower bound, want its exact age", x.step, x.drained)
	}
	if _, err := admin.Exec(ctx, "UPDATE caps SET status = 'PUBLISHED', published_at = $1 WHERE id = 1000000", x.g.now); err != nil {
		t.Fatal(err)
	}
	x.late[0].published = true
	x.advance()
	x.untilExact("the late row's publication", 3)
}

// replay sets the oldest published row of the drained series back to
// pending (the oldest row of all, which the read by time meets: exact at
// once), then publishes it again.
func (x *walkRun) replay() {
	old := -1
	for i, r := range x.rows {
		if r.published && slices.Equal(x.s.Fold([]string{r.et, r.topic}), x.drained) && (old < 0 || r.created.Before(x.rows[old].created)) {
			old = i
		}
	}
	x.rows[old].published = false
	x.advance()
	if x.sample() {
		x.t.Fatalf("step %d: %q, a row of it set back to pending, said a lower bound, want its exact age", x.step, x.drained)
	}
	x.rows[old].published, x.rows[old].publishedTime = true, x.g.now
	x.advance()
	x.untilExact("the replayed row's publication", 3)
}

// TestWalkHorizon looks at the open transactions as a collection does
// (HorizonQuery) while another session holds one open: at the first look
// its start cannot be bounded (the horizon is unknown, no position may
// move); once a look has seen the database without it, a transaction
// opened after that look bounds the horizon at that look's time, and a
// walk's end past it is moved back to it, one before it kept.
func TestWalkHorizon(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db.Exec(t, obStatusSchema)
	o := obStatusOutbox()
	spec, err := openSpec(ctx, db.Admin, "ob", o, 0)
	if err != nil {
		t.Fatal(err)
	}
	type look struct {
		vxids  []string
		starts []pgtype.Int8
		now    int64
		known  bool
		server string
		pos    []pgtype.Text
	}
	var last look
	at := func(ends ...outboxsql.WalkPos) look {
		t.Helper()
		var seen []outboxsql.WalkSeen
		for i, v := range last.vxids {
			seen = append(seen, outboxsql.WalkSeen{VXID: v, Micro: last.starts[i].Int64, Known: last.starts[i].Valid})
		}
		l := look{pos: make([]pgtype.Text, len(ends))}
		dest := []any{&l.vxids, &l.starts, &l.now, &l.known, &l.server}
		for i := range l.pos {
			dest = append(dest, &l.pos[i])
		}
		q := spec.HorizonQuery(seen, last.now, last.now != 0, ends)
		if err := db.Admin.QueryRow(ctx, q, pgx.QueryExecModeSimpleProtocol).Scan(dest...); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
		last = l
		return l
	}
	open := func() pgx.Tx {
		tx, err := db.Admin.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Before the database's own cleanup, which waits for the session.
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		if _, err := tx.Exec(ctx, "INSERT INTO outbox (event_type) VALUES ('a')"); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	tx := open()
	if l := at(); l.known || len(l.vxids) == 0 {
		t.Fatalf("first look with a transaction open: horizon known %v, %d transactions; want unknown", l.known, len(l.vxids))
	}
	if l := at(); l.known {
		t.Fatal("second look, the same transaction still open: horizon known, want unknown (its start was never bounded)")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	at()
	tx = open()
	before := last.now
	future := outboxsql.WalkPos{At: "2999-01-01 00:00:00+00"}
	past := outboxsql.WalkPos{At: "2001-01-01 00:00:00+00"}
	l := at(future, past)
	if !l.known {
		t.Fatal("a transaction opened after the last look: horizon unknown, want it bounded by that look")
	}
	var moved time.Time
	if err := db.Admin.QueryRow(ctx, "SELECT $1::text::timestamptz", l.pos[0].String).Scan(&moved); err != nil {
		t.Fatal(err)
	}
	if moved.UnixMicro() != before {
		t.Errorf("a walk's end past the horizon moved to %s, want the last look's time %v", l.pos[0].String, time.UnixMicro(before).UTC())
	}
	var kept time.Time
	if err := db.Admin.QueryRow(ctx, "SELECT $1::text::timestamptz", l.pos[1].String).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if !kept.Equal(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("a walk's end before the horizon moved to %s, want it kept", l.pos[1].String)
	}
}

// TestWalkJoin: which series the catch-up cursor takes. A free cursor
// starts at a parked series' position (a short walk) and takes the
// series parked there; a series with no proof then waits (a lower
// bound) rather than send the walk back to the start; while the cursor
// starts from since, every series may join it.
func TestWalkJoin(t *testing.T) {
	p := outboxsql.WalkPos{At: "2030-01-01 00:00:00+00"}
	in := map[string][]string{"a": {"a"}, "b": {"b"}, "c": {"c"}}
	w := &otherWalk{parked: map[string]outboxsql.WalkPos{"b": p, "c": p}}
	waiting := w.join(in)
	if w.catchUp.pos != p || !w.catchUp.keys["b"] || !w.catchUp.keys["c"] || w.catchUp.keys["a"] {
		t.Errorf("catch-up %+v, want b and c from their parked position", w.catchUp)
	}
	if !slices.EqualFunc(waiting, [][]string{{"a"}}, slices.Equal) {
		t.Errorf("waiting %q, want a", waiting)
	}
	if len(w.parked) != 0 {
		t.Errorf("parked %v after joining, want none", w.parked)
	}
	w = &otherWalk{parked: map[string]outboxsql.WalkPos{}, steady: walkCursor{keys: map[string]bool{"c": true}, pos: p}}
	if waiting := w.join(in); len(waiting) != 0 || !w.catchUp.keys["a"] || !w.catchUp.keys["b"] || w.catchUp.pos.Set() || w.catchUp.keys["c"] {
		t.Errorf("catch-up %+v, waiting %q: want a and b from since, c left to the steady cursor", w.catchUp, waiting)
	}
}
