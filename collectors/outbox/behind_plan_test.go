package outbox

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// The query of the rows behind the slot is a range scan of created_at
// over the lookback, whatever the table holds before it: checked on the
// plan the server makes for the prepared statement (the sampler prepares
// its queries), over a month of rows of which the last minutes are
// behind.
func TestBehindQueryIsRangeScan(t *testing.T) {
	s := startCommitTS(t)
	ctx := context.Background()
	s.exec(t, `CREATE TABLE big (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, kind text NOT NULL, region text);
		INSERT INTO big (created_at, kind, region) SELECT now() - (g * interval '30 seconds'), 'k' || (g % 5), 'eu' FROM generate_series(1, 86400) g;
		CREATE INDEX big_created ON big (created_at); CREATE INDEX big_labels ON big (kind, region, created_at); ANALYZE big`)
	o := behindOutbox("big")
	confirmed := time.Now().Add(-10 * time.Minute)
	var (
		plans          []string
		window, readIn int64
	)
	err := pg.ReadOnly(ctx, s.ro, func(tx pgx.Tx) error {
		cols, err := outboxsql.Introspect(ctx, tx, o.Table)
		if err != nil {
			return err
		}
		spec, err := outboxsql.NewSpec("big", o, cols)
		if err != nil {
			return err
		}
		spec.Behind = DefaultBehindLookback
		if _, err := tx.Exec(ctx, outboxsql.ConfirmedQuery, confirmed, ""); err != nil {
			return err
		}
		// The rows the state query reads from the index are exactly those
		// of the lookback's range: the rows behind (here all of them: the
		// table was filled by one transaction, after the confirmed time)
		// plus those the commit-time filter drops.
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM big WHERE created_at >= $1`, confirmed.Add(-DefaultBehindLookback)).Scan(&window); err != nil {
			return err
		}
		var lines []string
		if lines, readIn, err = analyseIndexReads(ctx, tx, spec.StateQuery()); err != nil {
			return err
		}
		t.Logf("state query, analysed:\n%s", strings.Join(lines, "\n"))
		plans, err = preparedPlans(ctx, tx, []string{spec.StateQuery(), spec.StuckQuery()})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("read %d rows through the index; %d rows in the lookback's range of the %d in the table", readIn, window, 86400)
	if readIn != window || window == 0 || window > 1000 {
		t.Errorf("the state query read %d rows, the lookback's range holds %d", readIn, window)
	}
	for i, plan := range plans {
		t.Logf("plan %d:\n%s", i, plan)
		if strings.Contains(plan, "Seq Scan") {
			t.Errorf("plan %d reads the whole table:\n%s", i, plan)
		}
		if !strings.Contains(plan, "Index Cond: ") || !strings.Contains(plan, "created_at >= ") {
			t.Errorf("plan %d has no index range on created_at:\n%s", i, plan)
		}
	}
}

// analyseIndexReads runs q under EXPLAIN ANALYZE and returns the plan's
// lines and the rows it read through indexes: those the index scans
// returned plus those their filters dropped.
func analyseIndexReads(ctx context.Context, tx pgx.Tx, q string) (lines []string, readIn int64, err error) {
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+q)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return nil, 0, err
		}
		lines = append(lines, line)
		for _, re := range []*regexp.Regexp{regexp.MustCompile(`Index Scan .*actual rows=(\d+)`), regexp.MustCompile(`Rows Removed by Filter: (\d+)`)} {
			if m := re.FindStringSubmatch(line); m != nil {
				n, _ := strconv.ParseInt(m[1], 10, 64)
				readIn += n
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	return lines, readIn, nil
}

// preparedPlans prepares each query, as the sampler does, and returns
// the plan the server makes for executing each prepared statement.
func preparedPlans(ctx context.Context, tx pgx.Tx, queries []string) ([]string, error) {
	var plans []string
	for i, q := range queries {
		name := fmt.Sprintf("behind_%d", i)
		if _, err := tx.Prepare(ctx, name, q); err != nil {
			return nil, fmt.Errorf("prepare %s: %w", q, err)
		}
		args := ""
		if strings.Contains(q, "$1") {
			args = "(100)"
		}
		rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) EXECUTE "+name+args)
		if err != nil {
			return nil, err
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				rows.Close()
				return nil, err
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		plans = append(plans, strings.Join(plan, "\n"))
	}
	return plans, nil
}
