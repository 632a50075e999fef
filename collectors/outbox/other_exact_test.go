package outbox

// The oracle of "other"'s oldest age past every cap: a few admitted
// combinations own more than max_count of the oldest rows (so the
// walk by time meets no row of "other" and the per combination reads
// run), more than MaxOldestTuples combinations exist (so those reads
// stop before the combinations sorting last), and more than max_count
// rows of a series of its own that sorts last (the deadline override's
// value, in combinations folded into its own series) are older than
// "other"'s oldest row, which sorts last too. Each seed generates such
// a state on a fake clock, collects it over a few steps, and compares
// every series with the brute-force computation over all the rows
// (capsCompare): the oldest age of each, "other" included, exactly.
//
//	go test -run OracleOtherExact ./collectors/outbox/ -other-seeds 12

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

var otherSeeds = flag.Int("other-seeds", 3, "oracle of other's oldest age: how many generated seeds to run (CI runs the default)")

// otherRegressionSeeds once found a fault; they run on every run,
// whatever -other-seeds says.
var otherRegressionSeeds = []uint64{
	// Before the walk folding into each series: other's oldest age read
	// 59.996 s against 426 s (the hidden row behind 656+ rows of the
	// override's value), and its past-deadline count 0 against 2. Seeds
	// 2-6 failed alike (60 s against 343-882 s).
	1,
}

func TestOracleOtherExact(t *testing.T) {
	env := newOracleEnv(t)
	runSeeds(t, "OracleOtherExact", otherRegressionSeeds, *otherSeeds, func(t *testing.T, seed uint64) { runOtherSeed(t, env, seed) })
}

// otherGen generates the states of TestOracleOtherExact.
type otherGen struct {
	*capsGen
	// hidden is where "other"'s oldest rows are: after the override's
	// value in index order ("zzz"), or before it ("zy").
	hidden string
}

func newOtherGen(seed uint64) *otherGen {
	r := rand.New(rand.NewPCG(seed, 0x07e4))
	o := obStatusOutbox()
	o.Table = "public.caps"
	o.MaxCount = 200 + r.IntN(600)
	o.MaxLabelValues = 5 + r.IntN(20)
	o.MaxLabelLength = 128
	o.Deadlines = map[string]time.Duration{"zz.payment.failed": 30 * time.Second}
	if r.IntN(2) == 0 {
		o.Deadlines[Other] = 45 * time.Second
	}
	g := &capsGen{r: r, kind: -1, now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), o: o}
	g.value = func(prefix string, n int) string { return fmt.Sprintf("%s.%05d", prefix, n) }
	hidden := "zy"
	if r.IntN(2) == 0 {
		hidden = "zzz"
	}
	return &otherGen{capsGen: g, hidden: hidden}
}

// initial returns the rows of the first state: fresh rows over more
// combinations than MaxOldestTuples; a block of old rows larger than
// max_count in a few combinations sorting first; more than max_count
// rows of the override's value over many destinations, younger than the
// block and sorting after the fresh rows; and "other"'s oldest rows,
// younger than those, in combinations sorting last or next to last.
func (g *otherGen) initial() []capsRow {
	var rows []capsRow
	add := func(age time.Duration, et, topic string) {
		rows = append(rows, capsRow{created: g.now.Add(-age), et: et, topic: topic, status: "PENDING"})
	}
	types := 50 + g.r.IntN(150)
	for i := 0; i < outboxsql.MaxOldestTuples+200+g.r.IntN(1500); i++ {
		add(time.Duration(g.r.IntN(60_000))*time.Millisecond, g.value("ev", i%types), g.value("dest", i/types))
	}
	blocks := 1 + g.r.IntN(3)
	for i := 0; i < 2*g.o.MaxCount; i++ {
		add(time.Duration(3000+g.r.IntN(1000))*time.Second, g.value("blk", g.r.IntN(blocks)), "b")
	}
	dests := 20 + g.r.IntN(300)
	for i := 0; i < g.o.MaxCount+g.o.MaxCount*g.r.IntN(3)/2+1; i++ {
		add(time.Duration(1000+g.r.IntN(1000))*time.Second, "zz.payment.failed", g.value("zd", g.r.IntN(dests)))
	}
	for i := 0; i < 1+g.r.IntN(4); i++ {
		add(time.Duration(300+g.r.IntN(600))*time.Second, g.value(g.hidden, g.r.IntN(5)), g.value("q", g.r.IntN(5)))
	}
	return rows
}

// next moves the clock, publishes a random third of the fresh rows and
// adds new ones, keeping the shape.
func (g *otherGen) next(rows []capsRow) []capsRow {
	for i := range rows {
		if !rows[i].published && strings.HasPrefix(rows[i].et, "ev.") && g.r.IntN(3) == 0 {
			rows[i].published, rows[i].publishedTime = true, g.now
		}
	}
	for i := 0; i < 200+g.r.IntN(1000); i++ {
		rows = append(rows, capsRow{created: g.now.Add(-time.Duration(g.r.IntN(5000)) * time.Millisecond),
			et: g.value("ev", g.r.IntN(400)), topic: g.value("dest", g.r.IntN(80)), status: "PENDING"})
	}
	return rows
}

func runOtherSeed(t *testing.T, env *oracleEnv, seed uint64) {
	g := newOtherGen(seed)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := env.db.Admin
	createCapsTable(ctx, t, admin)
	createIndexes(ctx, t, env, g.o)
	rows := g.initial()
	t.Logf("%d rows, max_count %d, max_label_values %d, hidden under %q, deadlines %v", len(rows), g.o.MaxCount, g.o.MaxLabelValues, g.hidden, g.o.Deadlines)
	c := NewCollector("ob", g.o, env.pool, testutil.Quiet())
	for step := 0; step < 3; step++ {
		if step > 0 {
			g.now = g.now.Add(time.Duration(5+g.r.IntN(60)) * time.Second)
			rows = g.next(rows)
		}
		if err := capsWrite(ctx, admin, g.now, rows); err != nil {
			t.Fatal(err)
		}
		got := collect(t, c)
		capsCompare(t, step, g.capsGen, got, rows, c.sampler)
		if t.Failed() {
			return
		}
	}
}

// createIndexes creates the indexes check asks for on o's table.
func createIndexes(ctx context.Context, t *testing.T, env *oracleEnv, o *config.Outbox) {
	t.Helper()
	cols, err := outboxsql.Introspect(ctx, env.pool, o.Table)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := outboxsql.NewSpec("ob", o, cols)
	if err != nil {
		t.Fatal(err)
	}
	for _, ix := range spec.Indexes() {
		if _, err := env.db.Admin.Exec(ctx, strings.Replace(ix.SQL(o.Table), "CONCURRENTLY ", "", 1)); err != nil {
			t.Fatal(err)
		}
	}
}
