package outboxsql_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// predicatesSchema holds every combination of status (each listed value,
// one listed nowhere, NULL), published_at, dead_at, lease_until,
// claimed_at, attempts and unknown_when, once with a text status
// (p_text) and once with an int status (p_int).
const predicatesSchema = `CREATE TABLE p_text (id serial, created_at timestamptz NOT NULL DEFAULT now(), status text,
	    published_at timestamptz, dead_at timestamptz, lease_until timestamptz, claimed_at timestamptz, attempts int, flag boolean);
	  CREATE TABLE p_int (LIKE p_text INCLUDING DEFAULTS);
	  ALTER TABLE p_int ALTER COLUMN status TYPE int USING status::int;
	  INSERT INTO p_text (status, published_at, dead_at, lease_until, claimed_at, attempts, flag)
	    SELECT s, p, d, l, c, a, f FROM unnest(ARRAY['PENDING','CLAIMED','PUBLISHED','ABANDONED','MAYBE','RETRY','WEIRD',NULL]) s,
	      unnest(ARRAY[NULL, now()]::timestamptz[]) p, unnest(ARRAY[NULL, now()]::timestamptz[]) d,
	      unnest(ARRAY[NULL, now() - interval '1 hour', now() + interval '1 hour']::timestamptz[]) l,
	      unnest(ARRAY[NULL, now() - interval '1 hour', now()]::timestamptz[]) c,
	      unnest(ARRAY[0, 1]) a, unnest(ARRAY[false, true]) f;
	  INSERT INTO p_int (status, published_at, dead_at, lease_until, claimed_at, attempts, flag)
	    SELECT s, p, d, l, c, a, f FROM unnest(ARRAY[0, 1, 2, 3, 4, 5, 9, NULL]) s,
	      unnest(ARRAY[NULL, now()]::timestamptz[]) p, unnest(ARRAY[NULL, now()]::timestamptz[]) d,
	      unnest(ARRAY[NULL, now() - interval '1 hour', now() + interval '1 hour']::timestamptz[]) l,
	      unnest(ARRAY[NULL, now() - interval '1 hour', now()]::timestamptz[]) c,
	      unnest(ARRAY[0, 1]) a, unnest(ARRAY[false, true]) f;`

// predicateCase is one style of configuration over one of the tables.
type predicateCase struct {
	name string
	o    config.Outbox
}

// TestPredicatesAgreeWithClassify: the SQL copy of the state rules
// (sqlRules and the Spec predicates built on it, which every query,
// partial index and ClassExpr use) agrees with Rules.Classify and
// Rules.Unknown on the real server, for every combination of status
// (each listed value, one listed nowhere, NULL), published_at, dead_at,
// claim column (NULL, lease passed, lease live), attempts and
// unknown_when, under each style of configuration.
func TestPredicatesAgreeWithClassify(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, predicatesSchema)
	// The admin pool only reads here: the predicates are SELECT
	// expressions, evaluated on the test's own database.
	pool := db.Admin
	for _, c := range predicateCases() {
		t.Run(c.name, func(t *testing.T) { checkPredicates(t, pool, c.o) })
	}
}

// predicateCases are the styles of configuration: status with and
// without in_flight, both timestamps, published_at only and delete on
// publish, each with every kind of lease, over p_text and (where there
// is a status column) p_int.
func predicateCases() []predicateCase {
	base := func(table string) config.Outbox {
		return config.Outbox{Table: table, ID: "id", CreatedAt: "created_at", Deadline: time.Minute, MaxCount: 10, MaxLabelValues: 10}
	}
	var cases []predicateCase
	add := func(name string, f func(o *config.Outbox)) {
		for _, table := range []string{"p_text", "p_int"} {
			o := base(table)
			f(&o)
			if table == "p_int" && o.Status == "" {
				continue
			}
			cases = append(cases, predicateCase{name + "/" + table, o})
		}
	}
	status := func(o *config.Outbox, inFlight bool) {
		vals := []string{"PENDING", "CLAIMED", "PUBLISHED", "ABANDONED", "MAYBE", "RETRY"}
		if o.Table == "p_int" {
			vals = []string{"0", "1", "2", "3", "4", "5"}
		}
		o.Status, o.Pending, o.Published, o.Dead = "status", []string{vals[0], vals[5]}, []string{vals[2]}, []string{vals[3]}
		if inFlight {
			o.InFlight = []string{vals[1]}
		}
		o.Unknown = []string{vals[4], vals[5]}
	}
	for _, lease := range []string{"lease_until", "claimed_at+ttl", "claimed_at", "none"} {
		setLease := func(o *config.Outbox) {
			switch lease {
			case "lease_until":
				o.LeaseUntil = "lease_until"
			case "claimed_at+ttl":
				o.ClaimedAt, o.LeaseTTL = "claimed_at", 30*time.Minute
			case "claimed_at":
				o.ClaimedAt = "claimed_at"
			}
			o.Attempts, o.UnknownWhen = "attempts", "flag"
		}
		add("status in_flight "+lease, func(o *config.Outbox) { status(o, true); setLease(o) })
		add("status no in_flight "+lease, func(o *config.Outbox) { status(o, false); setLease(o) })
		add("timestamps "+lease, func(o *config.Outbox) { o.PublishedAt, o.DeadAt = "published_at", "dead_at"; setLease(o) })
		add("published_at only "+lease, func(o *config.Outbox) { o.PublishedAt = "published_at"; setLease(o) })
		add("delete on publish "+lease, func(o *config.Outbox) { setLease(o) })
	}
	return cases
}

// checkPredicates evaluates the facts and every SQL predicate of o's
// Spec over each row of its table, and compares them with
// Rules.Classify and Rules.Unknown on the facts.
func checkPredicates(t *testing.T, pool *pgxpool.Pool, o config.Outbox) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cols, err := outboxsql.Introspect(ctx, pool, o.Table)
	if err != nil {
		t.Fatal(err)
	}
	s, err := outboxsql.NewSpec("p", &o, cols)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := outbox.NewRules(&o, s.IntStatus)
	if err != nil {
		t.Fatal(err)
	}
	exprs := s.ProbeExprs()
	rows, err := pool.Query(ctx, fmt.Sprintf("SELECT %s FROM %s t", strings.Join(exprs, ", "), o.Table))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var f outbox.Facts
		var pub, dead, unpub, claimed, uncl, unkPending, unkClaimed, passed bool
		if err := rows.Scan(&f.Status, &f.ClaimSet, &f.LeasePassed, &f.Attempted, &f.UnknownWhen,
			&f.PublishedSet, &f.DeadSet, &pub, &dead, &unpub, &claimed, &uncl, &unkPending, &unkClaimed, &passed); err != nil {
			t.Fatal(err)
		}
		st := rules.Classify(f)
		isUnpub := st == outbox.Pending || st == outbox.InFlight || st == outbox.LeaseExpired
		got := fmt.Sprintf("published=%v dead=%v unpublished=%v unclassified=%v", pub, dead, unpub, uncl)
		want := fmt.Sprintf("published=%v dead=%v unpublished=%v unclassified=%v", st == outbox.Published, st == outbox.Dead, isUnpub, st == outbox.Ignored)
		if got != want {
			t.Errorf("%+v (%v): SQL %s, Classify %s", f, st, got, want)
		}
		if !isUnpub {
			n++
			continue
		}
		if claimed != (st != outbox.Pending) {
			t.Errorf("%+v (%v): SQL claimed=%v", f, st, claimed)
		}
		if claimed && s.LeaseColumn() != "" && passed != (st == outbox.LeaseExpired) {
			t.Errorf("%+v (%v): SQL lease passed=%v", f, st, passed)
		}
		unknown := (!claimed && unkPending) || (claimed && unkClaimed)
		if unknown != rules.Unknown(st, f) {
			t.Errorf("%+v (%v): SQL unknown=%v, Rules.Unknown %v", f, st, unknown, !unknown)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 8*2*2*3*3*2*2 {
		t.Fatalf("%d rows compared", n)
	}
}
