// Command cdcbench measures one collection of the cdc collector over 20
// logical replication slots on one server against the bare SELECT from
// pg_replication_slots a hand-written check would run, in the same run,
// interleaved, and states the memory of the WAL history. It starts its own
// throwaway wal_level = logical cluster (the test server runs replica).
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
	cl, err := cdctest.Start(ctx, cdctest.Options{})
	if err != nil {
		return err
	}
	defer cl.Stop()
	admin, err := pgxpool.New(ctx, cl.URL("postgres"))
	if err != nil {
		return err
	}
	defer admin.Close()
	entries := map[string]*config.CDC{}
	if _, err := admin.Exec(ctx, `CREATE TABLE t (id bigserial PRIMARY KEY, v text)`); err != nil {
		return err
	}
	for i := 0; i < nSlots; i++ {
		name := fmt.Sprintf("slot_%02d", i)
		if _, err := admin.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, name); err != nil {
			return fmt.Errorf("create slot %s: %w", name, err)
		}
		// Slots at different positions, as connectors of different speed.
		if _, err := admin.Exec(ctx, `INSERT INTO t (v) SELECT md5(g::text) FROM generate_series(1, 200) g`); err != nil {
			return err
		}
		entries[fmt.Sprintf("cdc_%02d", i)] = &config.CDC{Database: "main", Slot: name, Deadline: time.Minute}
	}
	for i := 0; i < nSlots; i += 2 {
		if _, err := admin.Exec(ctx, `SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, fmt.Sprintf("slot_%02d", i)); err != nil {
			return err
		}
	}
	ro, err := pg.Open(ctx, &config.Database{DSN: config.Secret(cl.URL("postgres")), MaxConnections: 2,
		StatementTimeout: 5 * time.Second, LockTimeout: time.Second})
	if err != nil {
		return err
	}
	defer ro.Close()
	var names []string
	for _, e := range entries {
		names = append(names, e.Slot)
	}
	c := cdc.NewCollector("main", entries, ro, slog.New(slog.NewTextHandler(io.Discard, nil)))

	collect := func() (int, error) {
		ch := make(chan prometheus.Metric, 16*nSlots)
		err := c.Update(ctx, ch)
		close(ch)
		n := 0
		for range ch {
			n++
		}
		return n, err
	}
	bareQuery := func() (int, error) {
		rows, err := ro.Query(ctx, bare)
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
	// Warm up both: connections, plans, the checkpoint seed.
	for i := 0; i < 20; i++ {
		if _, err := collect(); err != nil {
			return err
		}
		if _, err := bareQuery(); err != nil {
			return err
		}
	}
	query := func() (int, error) {
		r, err := cdc.ReadSlots(ctx, ro, names)
		return len(r.Slots), err
	}
	// The same bare SELECT in an explicit READ ONLY transaction, as every
	// statement of the exporter runs: BEGIN and ROLLBACK are two more
	// round trips.
	bareRO := func() (int, error) {
		n := 0
		err := pg.ReadOnly(ctx, ro, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, bare)
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
	var tb, tc, tq, tr []time.Duration
	var metrics, rowsRead int
	for i := 0; i < rounds; i++ {
		// Alternate the order so neither always runs on a warmer cache.
		first, second := bareQuery, collect
		if i%2 == 1 {
			first, second = collect, bareQuery
		}
		for j, f := range []func() (int, error){first, second} {
			t0 := time.Now()
			n, err := f()
			d := time.Since(t0)
			if err != nil {
				return err
			}
			if (j == 0) == (i%2 == 0) {
				tb, rowsRead = append(tb, d), n
			} else {
				tc, metrics = append(tc, d), n
			}
		}
		t0 := time.Now()
		if _, err := query(); err != nil {
			return err
		}
		tq = append(tq, time.Since(t0))
		t0 = time.Now()
		if _, err := bareRO(); err != nil {
			return err
		}
		tr = append(tr, time.Since(t0))
		if i%10 == 0 {
			// Keep the WAL moving, as on a live server.
			if _, err := admin.Exec(ctx, `INSERT INTO t (v) VALUES ('x')`); err != nil {
				return err
			}
		}
	}
	mb, mc := median(tb), median(tc)
	fmt.Printf("| %d slots, %d rounds | median | p90 |\n|---|---|---|\n", nSlots, rounds)
	fmt.Printf("| bare SELECT from pg_replication_slots (%d rows) | %v | %v |\n", rowsRead, mb, pct(tb, 0.9))
	fmt.Printf("| one cdc collection (%d metrics, read-only transaction) | %v | %v |\n", metrics, mc, pct(tc, 0.9))
	fmt.Printf("| of which the slot query in its read-only transaction | %v | %v |\n", median(tq), pct(tq, 0.9))
	fmt.Printf("| bare SELECT in a read-only transaction (pg.ReadOnly) | %v | %v |\n", median(tr), pct(tr, 0.9))
	fmt.Printf("| ratio collection / bare | %.2fx | |\n", float64(mc)/float64(mb))
	fmt.Printf("| ratio collection / bare in a read-only transaction | %.2fx | |\n", float64(mc)/float64(median(tr)))
	perHistory := historyBytes()
	fmt.Printf("\nWAL history: %d samples x %d B = %d KiB per database (measured heap %d KiB), shared by its slots: %.0f B per slot at %d slots; one slot's own state (last reading) %d B.\n",
		cdc.DefaultHistorySize, cdc.SampleBytes, cdc.DefaultHistorySize*cdc.SampleBytes/1024, perHistory/1024,
		float64(perHistory)/float64(nSlots), nSlots, stateBytes())
	return nil
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
