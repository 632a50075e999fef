package database

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/collectors"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// TestServerFactsOncePerScrape: two databases of one server, collected
// by one Exporter, cost the server one transaction a scrape for their
// recovery state, counted on the wire, and each still has its series;
// when the database that reads for both is gone, the other reads its
// own and only the gone one's collection fails.
func TestServerFactsOncePerScrape(t *testing.T) {
	a, b := pgtest.New(t), pgtest.New(t)
	w := pgtest.NewWire(t)
	ctx := context.Background()
	open := func(db *pgtest.DB) *pgxpool.Pool {
		pool, err := pg.Open(ctx, &config.Database{DSN: config.Secret(w.URL(t, db.URL)), MaxConnections: 2,
			StatementTimeout: 10 * time.Second, LockTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	servers := NewServers()
	pa, pb := open(a), open(b)
	e := collectors.NewExporter(testutil.Quiet(), servers.Collector("a", pa), servers.Collector("b", pb))
	// scrape collects once and returns each database's in_recovery and
	// each collection's success.
	scrape := func() (rec, ok map[string]float64) {
		rec, ok = map[string]float64{}, map[string]float64{}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for _, m := range e.Collect(cctx) {
			switch {
			case testutil.IsMetric(m, "outbox_database_in_recovery"):
				rec[testutil.LabelOf(t, m, "database")] = testutil.MetricValue(t, m)
			case testutil.IsMetric(m, "outbox_exporter_collector_success"):
				ok[testutil.LabelOf(t, m, "target")] = testutil.MetricValue(t, m)
			}
		}
		return rec, ok
	}
	// A new session's first scrape describes the statement before its
	// round, an exchange of its own on the wire; from the second on, a
	// scrape is one transaction. The statement reads no table and costs
	// the server next to nothing to plan, so it is never prepared: that
	// would cost the second scrape an exchange more and save nothing.
	var first []int64
	for range 3 {
		w.Reset()
		scrape()
		first = append(first, w.Transactions())
	}
	if fmt.Sprint(first) != "[2 1 1]" {
		t.Fatalf("a new session's first three scrapes ended %v transactions on the wire, want [2 1 1] (the first describes the statement)", first)
	}
	const scrapes = 5
	w.Reset()
	for i := range scrapes {
		rec, ok := scrape()
		if rec["a"] != 0 || rec["b"] != 0 || len(rec) != 2 || ok["a"] != 1 || ok["b"] != 1 {
			t.Fatalf("scrape %d: in_recovery %v, success %v; want both databases collected, not in recovery", i, rec, ok)
		}
	}
	if n := w.Transactions(); n != scrapes {
		t.Fatalf("%d scrapes of two databases on one server ended %d transactions on the wire, want %d (one a scrape)", scrapes, n, scrapes)
	}

	// A collector that asks after the other's read ended, in the same
	// collection, shares it too.
	later := NewServers()
	seq := collectors.NewExporter(testutil.Quiet(), inTurn{later.Collector("a", pa), later.Collector("b", pb)})
	seq.Collect(ctx)
	w.Reset()
	for range scrapes {
		if n := len(seq.Collect(ctx)); n != 6 {
			t.Fatalf("collected %d metrics, want the two gauges of each database and the collection's two", n)
		}
	}
	if n := w.Transactions(); n != scrapes {
		t.Fatalf("%d scrapes, each collecting two databases on one server one after the other, ended %d transactions on the wire, want %d", scrapes, n, scrapes)
	}

	// With a collection of database a in the same scrape, as an
	// outbox's, the read goes in its round: still one transaction a
	// scrape. The collection asks once the read waits (the read waits
	// for it for as long as the test runs), so that the order of the two
	// is the one that matters.
	joined := NewServers()
	joined.ride = time.Hour
	ce := collectors.NewExporter(testutil.Quiet(), joined.Collector("a", pa), joined.Collector("b", pb), company{pa})
	joinedScrape := func() {
		t.Helper()
		for _, m := range ce.Collect(ctx) {
			if testutil.IsMetric(m, "outbox_exporter_collector_success") && testutil.MetricValue(t, m) != 1 {
				t.Fatalf("collection of %s failed", testutil.LabelOf(t, m, "target"))
			}
		}
	}
	joinedScrape()
	joinedScrape()
	w.Reset()
	for range scrapes {
		joinedScrape()
	}
	if n := w.Transactions(); n != scrapes {
		t.Fatalf("%d scrapes of two databases on one server and a collection of one of them ended %d transactions on the wire, want %d (one a scrape)", scrapes, n, scrapes)
	}

	// The database read first is gone: b reads its own.
	gone := a.Name
	a.Admin.Close()
	server, err := pgxpool.New(ctx, pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	if _, err := server.Exec(ctx, `DROP DATABASE "`+gone+`" WITH (FORCE)`); err != nil {
		t.Fatal(err)
	}
	rec, ok := scrape()
	if ok["a"] != 0 || ok["b"] != 1 || rec["b"] != 0 || len(rec) != 1 {
		t.Fatalf("after dropping a: in_recovery %v, success %v; want only a's collection failed", rec, ok)
	}
}

// company is another collection of a database (as an outbox's), sent
// in its rounds once the recovery state's read waits in their queue.
type company struct{ pool *pgxpool.Pool }

func (c company) Name() string                     { return "company" }
func (c company) Target() string                   { return "company" }
func (c company) Describe(chan<- *prometheus.Desc) {}

func (c company) Update(ctx context.Context, _ chan<- prometheus.Metric) error {
	r := pg.RoundsOf(c.pool)
	for deadline := time.Now().Add(10 * time.Second); r.Queued() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return errors.New("no read waited for a round within 10 s")
		}
	}
	return pg.ReadInRound(ctx, c.pool, func() *pgx.Batch {
		b := &pgx.Batch{}
		b.Queue(`SELECT 1`)
		return b
	})
}

// inTurn collects its collectors one after the other.
type inTurn []*Collector

func (c inTurn) Name() string                        { return "database" }
func (c inTurn) Target() string                      { return "in turn" }
func (c inTurn) Describe(ch chan<- *prometheus.Desc) { c[0].Describe(ch) }

func (c inTurn) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	for _, one := range c {
		if err := one.Update(ctx, ch); err != nil {
			return err
		}
	}
	return nil
}

// TestServerKey: databases share a reading only when their DSNs reach
// the same hosts.
func TestServerKey(t *testing.T) {
	key := func(dsn string) string {
		pc, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		return serverKey(pc)
	}
	same := [][2]string{
		{"postgres://u@db1:5432/main", "postgres://v@db1:5432/search"},
		{"host=db1,db2 port=5432,5433 dbname=a", "host=db1,db2 port=5432,5433 dbname=b"},
	}
	for _, c := range same {
		if key(c[0]) != key(c[1]) {
			t.Errorf("%s and %s: keys %q and %q, want the same", c[0], c[1], key(c[0]), key(c[1]))
		}
	}
	apart := [][2]string{
		{"postgres://u@db1:5432/main", "postgres://u@db1:5433/main"},
		{"postgres://u@db1:5432/main", "postgres://u@db2:5432/main"},
		{"host=db1 dbname=a", "host=db1,db2 dbname=b"},
	}
	for _, c := range apart {
		if key(c[0]) == key(c[1]) {
			t.Errorf("%s and %s: both %q, want them apart", c[0], c[1], key(c[0]))
		}
	}
}
