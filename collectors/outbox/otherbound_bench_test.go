package outbox

// The cost of reading a series holding "other" that no read found a row
// of (a kept combination whose rows were all published), in a backlog of
// -unfound-rows pending rows (200 event types by 60 destinations), as a
// capped collection reads it:
//
//	go test -run '^$' -bench OtherUnfound -benchtime 5x ./collectors/outbox/ -unfound-rows 2000000
//
// walk: the walk in time order to the index's end (FoldOldestQuery, as
// before the bounded reads); range and time: FoldBoundedQuery with its
// count, in the first value's range and by time, at max_count's default
// entry limit; resume: the resumed walk (FoldResumeQuery) with the look
// at the open transactions (HorizonQuery), at its first collection (from
// the index's start, max_count's default entry limit) and steady (from a
// position 1,000 entries before the end: the rows written since the last
// collection).

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

var unfoundRows = flag.Int("unfound-rows", 200_000, "BenchmarkOtherUnfound: pending rows in the backlog")

func BenchmarkOtherUnfound(b *testing.B) {
	db := pgtest.New(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	db.Exec(b, obStatusSchema)
	db.Exec(b, fmt.Sprintf(`INSERT INTO outbox (created_at, event_type, topic)
	  SELECT now() - (%[1]d - i) * interval '1 millisecond', 'ev.' || (i %% 200), 'dest.' || (i / 200 %% 60)
	  FROM generate_series(1, %[1]d) i;
	  INSERT INTO outbox (created_at, event_type, topic, status, published_at)
	  SELECT now() - interval '1 hour', 'gone.type', 'dest.1', 'PUBLISHED', now() FROM generate_series(1, 1000)`, *unfoundRows))
	o := obStatusOutbox()
	o.MaxCount = config.DefaultMaxCount
	cols, err := outboxsql.Introspect(ctx, db.Admin, o.Table)
	if err != nil {
		b.Fatal(err)
	}
	plain, err := outboxsql.NewSpec("ob", o, cols)
	if err != nil {
		b.Fatal(err)
	}
	for _, ix := range plain.Indexes() {
		db.Exec(b, ix.SQL(o.Table))
	}
	db.Exec(b, "VACUUM ANALYZE outbox")
	spec, err := openSpec(ctx, db.Admin, "ob", o, 0)
	if err != nil {
		b.Fatal(err)
	}
	// "gone.type" kept with its destinations folded, its rows all
	// published; "dest.none" kept under other, never written.
	f := outboxsql.LabelFold{Other: Other, Keep: [][]string{{"ev.1", "gone.type"}, {"dest.1", "dest.none"}},
		Tuples: [][]string{{"gone.type", Other}, {Other, "dest.none"}, {"ev.1", "dest.1"}}}
	gone, none := [][]string{{"gone.type", Other}}, [][]string{{Other, "dest.none"}}
	run := func(name string, qs ...string) {
		b.Run(name, func(b *testing.B) {
			for range b.N {
				for _, q := range qs {
					rows, err := db.Admin.Query(ctx, q, pgx.QueryExecModeSimpleProtocol)
					if err != nil {
						b.Fatalf("%v\n%s", err, q)
					}
					rows.Close()
					if err := rows.Err(); err != nil {
						b.Fatalf("%v\n%s", err, q)
					}
				}
			}
		})
	}
	run("walk/first=gone.type", spec.FoldOldestQuery(f, gone, -1, -1))
	run("walk/first=other", spec.FoldOldestQuery(f, none, -1, -1))
	limit := o.MaxCount
	q, count := spec.FoldBoundedQuery(f, gone, "gone.type", -1, limit)
	run("range/first=gone.type", q, count)
	q, count = spec.FoldBoundedQuery(f, none, Other, -1, limit)
	run("time/first=other", q, count)
	var near outboxsql.WalkPos
	if err := db.Admin.QueryRow(ctx, `SELECT created_at::text FROM outbox WHERE published_at IS NULL
	  ORDER BY created_at DESC OFFSET 1000 LIMIT 1`).Scan(&near.At); err != nil {
		b.Fatal(err)
	}
	horizon := spec.HorizonQuery(nil, 0, true, []outboxsql.WalkPos{near})
	first := spec.FoldResumeQuery(f, none, outboxsql.WalkPos{}, -1, limit)
	steady := spec.FoldResumeQuery(f, none, near, -1, limit)
	for _, q := range []string{first, steady} {
		var plan []string
		rows, err := db.Admin.Query(ctx, "EXPLAIN "+q, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			b.Fatal(err)
		}
		for rows.Next() {
			var l string
			if err := rows.Scan(&l); err != nil {
				b.Fatal(err)
			}
			plan = append(plan, l)
		}
		b.Logf("plan:\n%s", strings.Join(plan, "\n"))
	}
	run("resume/first", first, horizon)
	run("resume/steady", steady, horizon)
}
