// Command cdcbench measures one collection of the cdc collector over 20
// logical replication slots on one server against the bare SELECT from
// pg_replication_slots a hand-written check would run, in the same run,
// interleaved, and states the memory of the WAL history. It starts its own
// throwaway wal_level = logical cluster (the test server runs replica),
// with track_commit_timestamp on; half the slots are behind the last
// checkpoint, dated by the commits below their catalog_xmin, and the
// commit-time read such a slot costs when its catalog_xmin moves is
// measured on its own.
//
//	go run ./bench/cdcbench              # 20 slots, 300 rounds
//	go run ./bench/cdcbench -slots 50 -rounds 500
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/collectors/cdc"
	"github.com/outbox-exporter/outbox_exporter/collectors/cdc/cdctest"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// bare is what a hand-written check reads: every slot's row, one
// statement, no transaction of its own.
const bare = `SELECT slot_name, slot_type, active, wal_status, safe_wal_size, confirmed_flush_lsn, pg_current_wal_lsn() FROM pg_replication_slots`

func main() {
	slots := flag.Int("slots", 20, "logical replication slots on the server")
	rounds := flag.Int("rounds", 300, "measured rounds; each runs the bare SELECT and one collection")
	flag.Parse()
	if err := run(*slots, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "cdcbench:", err)
		os.Exit(1)
	}
}

func run(nSlots, rounds int) error {
	ctx := context.Background()
	cl, err := cdctest.Start(ctx, cdctest.Options{Settings: map[string]string{"track_commit_timestamp": "on"}})
	if err != nil {
		return err
	}
	defer cl.Stop()
	admin, err := pgxpool.New(ctx, cl.URL("postgres"))
	if err != nil {
		return err
	}
	defer admin.Close()
	entries, err := makeSlots(ctx, admin, nSlots)
	if err != nil {
		return err
	}
	// The slots not advanced fall behind the last checkpoint: older than
	// anything a collection samples.
	if _, err := admin.Exec(ctx, `CHECKPOINT`); err != nil {
		return err
	}
	ro, err := pg.Open(ctx, &config.Database{DSN: config.Secret(cl.URL("postgres")), MaxConnections: 2,
		StatementTimeout: 5 * time.Second, LockTimeout: time.Second})
	if err != nil {
		return err
	}
	defer ro.Close()
	b := newBench(ctx, ro, entries)
	if err := admin.QueryRow(ctx, `SELECT catalog_xmin::text::bigint FROM pg_replication_slots WHERE slot_name = 'slot_01'`).Scan(&b.xmin); err != nil {
		return err
	}
	// Warm up both: connections, plans, the checkpoint seed.
	for i := 0; i < 20; i++ {
		if _, err := b.collect(); err != nil {
			return err
		}
		if _, err := b.bareQuery(); err != nil {
			return err
		}
	}
	t, err := b.measure(admin, rounds)
	if err != nil {
		return err
	}
	t.report(nSlots, rounds)
	return nil
}

// makeSlots creates nSlots logical slots at different positions, half of
// them advanced to the current WAL end, and returns their config entries.
func makeSlots(ctx context.Context, admin *pgxpool.Pool, nSlots int) (map[string]*config.CDC, error) {
	entries := map[string]*config.CDC{}
	if _, err := admin.Exec(ctx, `CREATE TABLE t (id bigserial PRIMARY KEY, v text)`); err != nil {
		return nil, err
	}
	for i := 0; i < nSlots; i++ {
		name := fmt.Sprintf("slot_%02d", i)
		if _, err := admin.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, name); err != nil {
			return nil, fmt.Errorf("create slot %s: %w", name, err)
		}
		// Slots at different positions, as connectors of different speed.
		if _, err := admin.Exec(ctx, `INSERT INTO t (v) SELECT md5(g::text) FROM generate_series(1, 200) g`); err != nil {
			return nil, err
		}
		entries[fmt.Sprintf("cdc_%02d", i)] = &config.CDC{Database: "main", Slot: name, Deadline: time.Minute}
	}
	for i := 0; i < nSlots; i += 2 {
		if _, err := admin.Exec(ctx, `SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, fmt.Sprintf("slot_%02d", i)); err != nil {
			return nil, err
		}
	}
	return entries, nil
}

// bench holds what the four measured reads share.
type bench struct {
	ctx   context.Context
	ro    *pgxpool.Pool
	c     *cdc.Collector
	names []string
	// xmin is the catalog_xmin of a slot behind the last checkpoint.
	xmin uint32
}

func newBench(ctx context.Context, ro *pgxpool.Pool, entries map[string]*config.CDC) *bench {
	var names []string
	for _, e := range entries {
		names = append(names, e.Slot)
	}
	c := cdc.NewCollector("main", entries, ro, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return &bench{ctx: ctx, ro: ro, c: c, names: names}
}

// collect is one collection; it returns the metrics sent.
func (b *bench) collect() (int, error) {
	ch := make(chan prometheus.Metric, 16*len(b.names))
	err := b.c.Update(b.ctx, ch)
	close(ch)
	n := 0
	for range ch {
		n++
	}
	return n, err
}

// bareQuery is the hand-written check; it returns the rows read.
func (b *bench) bareQuery() (int, error) {
	rows, err := b.ro.Query(b.ctx, bare)
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	return n, rows.Err()
}

// query is the collector's slot query alone.
func (b *bench) query() (int, error) {
	r, err := cdc.ReadSlots(b.ctx, b.ro, b.names)
	return len(r.Slots), err
}

// bareRO is the same bare SELECT in an explicit READ ONLY transaction, as
// every statement of the exporter runs: BEGIN and ROLLBACK are two more
// round trips.
func (b *bench) bareRO() (int, error) {
	n := 0
	err := pg.ReadOnly(b.ctx, b.ro, func(tx pgx.Tx) error {
		rows, err := tx.Query(b.ctx, bare)
		if err != nil {
			return err
		}
		for rows.Next() {
			n++
		}
		rows.Close()
		return rows.Err()
	})
	return n, err
}

// timings are the measured rounds' durations: bare SELECT, collection,
// slot query, bare SELECT read-only.
type timings struct {
	tb, tc, tq, tr, tx []time.Duration
	metrics, rowsRead  int
}

func (b *bench) measure(admin *pgxpool.Pool, rounds int) (*timings, error) {
	t := &timings{}
	for i := 0; i < rounds; i++ {
		// Alternate the order so neither always runs on a warmer cache.
		first, second := b.bareQuery, b.collect
		if i%2 == 1 {
			first, second = b.collect, b.bareQuery
		}
		for j, f := range []func() (int, error){first, second} {
			t0 := time.Now()
			n, err := f()
			d := time.Since(t0)
			if err != nil {
				return nil, err
			}
			if (j == 0) == (i%2 == 0) {
				t.tb, t.rowsRead = append(t.tb, d), n
			} else {
				t.tc, t.metrics = append(t.tc, d), n
			}
		}
		t0 := time.Now()
		if _, err := b.query(); err != nil {
			return nil, err
		}
		t.tq = append(t.tq, time.Since(t0))
		t0 = time.Now()
		if _, err := b.bareRO(); err != nil {
			return nil, err
		}
		t.tr = append(t.tr, time.Since(t0))
		t0 = time.Now()
		if _, _, err := cdc.CommittedBefore(b.ctx, b.ro, b.xmin, cdc.CommitWindow); err != nil {
			return nil, err
		}
		t.tx = append(t.tx, time.Since(t0))
		if i%10 == 0 {
			// Keep the WAL moving, as on a live server.
			if _, err := admin.Exec(b.ctx, `INSERT INTO t (v) VALUES ('x')`); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

func (t *timings) report(nSlots, rounds int) {
	mb, mc := median(t.tb), median(t.tc)
	fmt.Printf("| %d slots, %d rounds | median | p90 |\n|---|---|---|\n", nSlots, rounds)
	fmt.Printf("| bare SELECT from pg_replication_slots (%d rows) | %v | %v |\n", t.rowsRead, mb, pct(t.tb, 0.9))
	fmt.Printf("| one cdc collection (%d metrics, read-only transaction) | %v | %v |\n", t.metrics, mc, pct(t.tc, 0.9))
	fmt.Printf("| of which the slot query in its read-only transaction | %v | %v |\n", median(t.tq), pct(t.tq, 0.9))
	fmt.Printf("| bare SELECT in a read-only transaction (pg.ReadOnly) | %v | %v |\n", median(t.tr), pct(t.tr, 0.9))
	fmt.Printf("| the commit-time read of one slot behind the checkpoint (%d ids; once per catalog_xmin) | %v | %v |\n", cdc.CommitWindow, median(t.tx), pct(t.tx, 0.9))
	fmt.Printf("| ratio collection / bare | %.2fx | |\n", float64(mc)/float64(mb))
	fmt.Printf("| ratio collection / bare in a read-only transaction | %.2fx | |\n", float64(mc)/float64(median(t.tr)))
	perHistory := historyBytes()
	fmt.Printf("\nWAL history: %d samples x %d B = %d KiB per database (measured heap %d KiB), shared by its slots: %.0f B per slot at %d slots; one slot's own state (last reading) %d B.\n",
		cdc.DefaultHistorySize, cdc.SampleBytes, cdc.DefaultHistorySize*cdc.SampleBytes/1024, perHistory/1024,
		float64(perHistory)/float64(nSlots), nSlots, stateBytes())
}

// historyBytes measures the heap a full History holds.
func historyBytes() int {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	h := cdc.NewHistory(cdc.DefaultHistorySize, 0)
	at := time.Now()
	for i := 0; i < 2*cdc.DefaultHistorySize; i++ {
		h.Add(at.Add(time.Duration(i)*time.Second), cdc.LSN(i*100))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(h)
	return int(after.HeapAlloc - before.HeapAlloc)
}

// stateBytes is the size of the state the collector keeps per slot.
func stateBytes() int {
	return int(sizeofState)
}

func median(ds []time.Duration) time.Duration { return pct(ds, 0.5) }

func pct(ds []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(p*float64(len(s)-1))]
}
