package main

// The capped collection at many label combinations (-combos): a 2M-row
// backlog, all unpublished, spread evenly over label combinations and
// over 50 minutes, plus one hour-old zz.payment.failed row whose value
// has a 30 s deadline override. All pending; with -combos-claimed, one
// row in twenty is claimed (half of those with an expired lease), as a
// stalled relay leaves them. Each cardinality has its own table in the
// database outbox_bench_combos, built once and reused. The whole
// collection is timed against the naive exact GROUP BY over the
// unpublished rows in the same run, and the zz series is checked to
// carry its true age.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

const combosDB = "outbox_bench_combos"

// combosOutbox is benchOutbox on table, with the override of the stuck
// row's value.
func combosOutbox(table string) *config.Outbox {
	o := benchOutbox()
	o.Table = "public." + table
	o.Deadlines = map[string]time.Duration{"zz.payment.failed": 30 * time.Second}
	return o
}

// runCombos measures the capped collection at each number of label
// combinations in counts, with backlog unpublished rows.
func runCombos(server string, counts []int, backlog, runs, naiveRuns int, claimed bool) error {
	ctx := context.Background()
	u, err := url.Parse(server)
	if err != nil {
		return err
	}
	if err := ensureDB(ctx, server, combosDB); err != nil {
		return err
	}
	u.Path = "/" + combosDB
	rw, err := pgxpool.New(ctx, u.String())
	if err != nil {
		return err
	}
	defer rw.Close()
	ro, err := pg.Open(ctx, &config.Database{DSN: config.Secret(u.String()), MaxConnections: 2,
		StatementTimeout: 5 * time.Minute, LockTimeout: time.Second})
	if err != nil {
		return err
	}
	defer ro.Close()
	kind, prefix := "all pending", "outbox_p"
	if claimed {
		kind, prefix = "one in twenty claimed", "outbox_c"
	}
	fmt.Printf("\ncapped collection, %d unpublished rows (%s, max_count %d), load average %s\n\n", backlog, kind, config.DefaultMaxCount, loadavg())
	fmt.Println("| label combinations | first collection | one collection, median (best) | naive GROUP BY, median | ratio | zz series: oldest age, past deadline |")
	fmt.Println("|---:|---:|---:|---:|---:|---|")
	for _, n := range counts {
		table := prefix + strconv.Itoa(n)
		if err := buildCombos(ctx, rw, ro, table, n, backlog, claimed); err != nil {
			return err
		}
		o := combosOutbox(table)
		c := outbox.NewCollector(table, o, ro, slog.New(slog.NewTextHandler(io.Discard, nil)))
		t0 := time.Now()
		if _, err := update(ctx, c); err != nil {
			return err
		}
		first := time.Since(t0)
		// Only Update is timed; what the bench reads of its metrics is
		// not the collection's cost.
		var got []prometheus.Metric
		coll, best, selfCPU, serverCPU, err := medianCPU(ctx, ro, runs, func() error {
			var err error
			got, err = update(ctx, c)
			return err
		})
		if err != nil {
			return fmt.Errorf("collect %s: %w", table, err)
		}
		last := summarize(got)
		naive, _, err := median(naiveRuns, func() error {
			return drain(ctx, ro, `SELECT event_type, topic, count(*), min(created_at) FROM `+table+`
			  WHERE status IN ('PENDING','CLAIMED') GROUP BY 1, 2`)
		})
		if err != nil {
			return fmt.Errorf("naive %s: %w", table, err)
		}
		zz := fmt.Sprintf("%.0f s, %.0f", last["outbox_oldest_pending_age_seconds|zz.payment.failed"],
			last["outbox_past_deadline_events|zz.payment.failed"])
		logf("%d combinations: first %v, median %v (best %v), CPU a collection %v here and %v in the server, naive %v, zz %s",
			n, first, coll, best, selfCPU, serverCPU, naive, zz)
		fmt.Printf("| %d | %s | %s (%s) | %s | %.0fx | %s |\n", n, ms(first), ms(coll), ms(best), ms(naive),
			float64(naive)/float64(coll), zz)
	}
	return nil
}

// updateCh is the channel update collects into, made once: a channel
// of this size is a megabyte, which a bench that made one per
// collection would count as the collection's garbage.
var updateCh = make(chan prometheus.Metric, 1<<16)

// update collects c once and returns its metrics.
func update(ctx context.Context, c *outbox.Collector) ([]prometheus.Metric, error) {
	err := c.Update(ctx, updateCh)
	ms := make([]prometheus.Metric, 0, len(updateCh))
	for len(updateCh) > 0 {
		ms = append(ms, <-updateCh)
	}
	return ms, err
}

// summarize keeps, by "name|event_type", the largest oldest age and
// past-deadline count of ms.
func summarize(ms []prometheus.Metric) map[string]float64 {
	out := map[string]float64{}
	for _, m := range ms {
		d := m.Desc().String()
		for _, name := range []string{"outbox_oldest_pending_age_seconds", "outbox_past_deadline_events"} {
			if !strings.Contains(d, `fqName: "`+name+`"`) {
				continue
			}
			var pb dto.Metric
			if m.Write(&pb) != nil {
				continue
			}
			for _, l := range pb.Label {
				if l.GetName() == "event_type" {
					k := name + "|" + l.GetValue()
					out[k] = math.Max(out[k], pb.Gauge.GetValue())
				}
			}
		}
	}
	return out
}

// ensureDB creates database name on server unless it is there.
func ensureDB(ctx context.Context, server, name string) error {
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", config.RedactDSN(server), err)
	}
	defer admin.Close(ctx)
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return err
		}
	}
	return nil
}

// buildCombos creates table with backlog unpublished rows over n label
// combinations (event types × topics), one in twenty claimed if claimed,
// and the indexes check asks for, unless a table of that shape is there.
func buildCombos(ctx context.Context, rw, ro *pgxpool.Pool, table string, n, backlog int, claimed bool) error {
	var have int64
	if err := rw.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = $1`, table).Scan(&have); err != nil {
		return err
	}
	if have == 1 {
		var rows int64
		if err := rw.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&rows); err != nil {
			return err
		}
		if rows == int64(backlog)+1 {
			logf("reusing %s", table)
			// Create what a newer check asks for.
			return createCombosIndexes(ctx, rw, ro, table)
		}
	}
	types := int(math.Sqrt(float64(n)*10/3) + 0.5) // 200 × 60 for 12,000
	for n%types != 0 {
		types++
	}
	topics := n / types
	every := 20
	if !claimed {
		every = backlog + 1 // no row
	}
	logf("building %s: %d rows over %d event types × %d topics", table, backlog, types, topics)
	for _, q := range []string{
		`DROP TABLE IF EXISTS ` + table,
		`CREATE TABLE ` + table + ` (
		  event_id bigint PRIMARY KEY,
		  created_at timestamptz NOT NULL,
		  event_type text NOT NULL,
		  topic text NOT NULL,
		  status text NOT NULL,
		  published_at timestamptz,
		  lease_until timestamptz,
		  attempts int NOT NULL DEFAULT 0,
		  last_error text,
		  payload text NOT NULL)`,
		fmt.Sprintf(`INSERT INTO %[1]s (event_id, created_at, event_type, topic, status, lease_until, payload)
		  SELECT i, now() - interval '50 minutes' + i * (interval '50 minutes' / %[2]d),
		    'ev.' || lpad((i %% %[3]d)::text, 4, '0'), 'dest.' || lpad(((i / %[3]d) %% %[4]d)::text, 3, '0'),
		    CASE WHEN i %% %[5]d = 0 THEN 'CLAIMED' ELSE 'PENDING' END,
		    CASE WHEN i %% (2 * %[5]d) = 0 THEN now() - interval '1 minute' WHEN i %% %[5]d = 0 THEN now() + interval '1 hour' END,
		    md5(i::text)
		  FROM generate_series(1, %[2]d) i`, table, backlog, types, topics, every),
		fmt.Sprintf(`INSERT INTO %s (event_id, created_at, event_type, topic, status, payload)
		  VALUES (0, now() - interval '1 hour', 'zz.payment.failed', 'payments', 'PENDING', 'stuck')`, table),
	} {
		if _, err := rw.Exec(ctx, q); err != nil {
			return fmt.Errorf("build %s: %w", table, err)
		}
	}
	return createCombosIndexes(ctx, rw, ro, table)
}

// createCombosIndexes creates the indexes check asks for on table, then
// vacuums it as autovacuum would.
func createCombosIndexes(ctx context.Context, rw, ro *pgxpool.Pool, table string) error {
	rep, err := outbox.Check(ctx, ro, table, combosOutbox(table))
	if err != nil {
		return err
	}
	for _, st := range rep.Statements {
		logf("%s", st)
		if _, err := rw.Exec(ctx, st); err != nil {
			return fmt.Errorf("index %s: %w", table, err)
		}
	}
	if _, err := rw.Exec(ctx, `VACUUM ANALYZE `+table); err != nil {
		return fmt.Errorf("vacuum %s: %w", table, err)
	}
	return nil
}

// runCombosFlag is runCombos with the counts as the -combos flag gives
// them.
func runCombosFlag(server, list string, backlog, runs, naiveRuns int, claimed bool) error {
	var counts []int
	for i, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-combos: item %d is not a positive number of label combinations", i+1)
		}
		counts = append(counts, n)
	}
	return runCombos(server, counts, backlog, runs, naiveRuns, claimed)
}
