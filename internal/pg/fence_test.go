package pg

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// openFenced makes a database with schema (SQL run as the superuser) and
// a fenced pool of one session on it, closed when the test ends.
func openFenced(t *testing.T, schema string) (context.Context, *pgtest.DB, *pgxpool.Pool) {
	t.Helper()
	db := pgtest.New(t)
	if schema != "" {
		db.Exec(t, schema)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	pool, err := Open(ctx, fencedPool(t, db, 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return ctx, db, pool
}

func fencedPool(t *testing.T, db *pgtest.DB, conns int) *config.Database {
	t.Helper()
	return &config.Database{DSN: config.Secret(db.URL), MaxConnections: conns,
		StatementTimeout: 5 * time.Second, LockTimeout: time.Second}
}

// A caller that forgets ReadOnly and runs set_config(...off...) in one
// statement and a write in the next, on the pool or on one acquired
// session, writes nothing: the session is closed before the write, or
// destroyed when released.
func TestFenceRefusesSessionsTurnedReadWrite(t *testing.T) {
	ctx, db, pool := openFenced(t, `CREATE TABLE written (n int); CREATE SEQUENCE seq;`)
	var err error
	const off = `SELECT set_config('default_transaction_read_only', 'off', false)`

	// On one acquired session: the second statement must not run.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, off); err != nil {
		t.Fatalf("set_config in an autocommit statement: %v", err)
	}
	_, werr := conn.Exec(ctx, `INSERT INTO written VALUES (1)`)
	_, serr := conn.Exec(ctx, `SELECT nextval('seq')`)
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO written VALUES (2)`)
	berr := conn.SendBatch(ctx, b).Close()
	conn.Release()
	if werr == nil || serr == nil || berr == nil {
		t.Errorf("statements after the session turned read-write ran: insert %v, nextval %v, batch %v", werr, serr, berr)
	}

	// Through the pool: each statement on its own checkout. With one
	// connection the write would get the tainted session if it were
	// pooled again.
	for i := 0; i < 3; i++ {
		if _, err := pool.Exec(ctx, off); err != nil {
			t.Fatalf("set_config: %v", err)
		}
		_, err := pool.Exec(ctx, `INSERT INTO written VALUES (3)`)
		if err == nil {
			t.Errorf("round %d: the insert after set_config ran", i)
		} else if !strings.Contains(err.Error(), "read-only") {
			t.Errorf("round %d: the insert failed for another reason: %v", i, err)
		}
	}
	// A fresh session still works and is read-only.
	var ro string
	if err := pool.QueryRow(ctx, `SHOW default_transaction_read_only`).Scan(&ro); err != nil || ro != "on" {
		t.Errorf("fresh session: default_transaction_read_only %q, %v", ro, err)
	}
	assertUnwritten(t, db)
}

// assertUnwritten fails if anything was written: rows, sequence values or
// large objects.
func assertUnwritten(t *testing.T, db *pgtest.DB) {
	t.Helper()
	ctx := context.Background()
	var rows, los int
	var last *int64
	if err := db.Admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM written), (SELECT count(*) FROM pg_largeobject_metadata), (SELECT last_value FROM pg_sequences WHERE sequencename = 'seq')`).Scan(&rows, &los, &last); err != nil {
		t.Fatal(err)
	}
	if rows != 0 || los != 0 || last != nil {
		t.Errorf("written: %d rows, %d large objects, sequence at %v", rows, los, last)
	}
}

// Through ReadOnly, set_config(..., false) is rolled back with the
// transaction: the session stays read-only and pooled.
func TestReadOnlyUndoesSetConfig(t *testing.T) {
	ctx, db, pool := openFenced(t, `CREATE TABLE written (n int); CREATE SEQUENCE seq;`)
	var err error
	var pid1, pid2 int
	err = ReadOnly(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('default_transaction_read_only', 'off', false)`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT set_config('transaction_read_only', 'off', false)`); err == nil {
			t.Error("a read-only transaction was made read-write")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid1)
	err = ReadOnly(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO written VALUES (1)`)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("insert through ReadOnly: %v", err)
	}
	pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid2)
	if pid1 != pid2 {
		t.Errorf("the session was replaced (%d, then %d): ReadOnly left it tainted", pid1, pid2)
	}
	assertUnwritten(t, db)
}

func TestPreparePredicates(t *testing.T) {
	ctx, db, pool := openFenced(t, `CREATE TABLE outbox (id int, attempts int, tenant text); CREATE TABLE written (n int); CREATE SEQUENCE seq;
CREATE FUNCTION write_one() RETURNS boolean LANGUAGE plpgsql AS $$BEGIN INSERT INTO written VALUES (1); RETURN true; END$$;`)
	var err error
	err = PreparePredicates(ctx, pool, "public.outbox",
		Predicate{"outboxes.a.filter", "tenant = 'x' AND write_one() AND nextval('seq') > 0"},
		Predicate{"outboxes.a.unknown_when", "attempts > 3"})
	if err != nil {
		t.Errorf("good predicates: %v", err)
	}
	err = PreparePredicates(ctx, pool, "public.outbox",
		Predicate{"outboxes.b.filter", "attempts + 1"},
		Predicate{"outboxes.b.unknown_when", "attempts > 3 tenant = 'x'"},
		Predicate{"outboxes.c.filter", "nosuchcolumn = 1"},
		Predicate{"outboxes.d.filter", "tenant = 'ok'"})
	if err == nil {
		t.Fatal("bad predicates passed")
	}
	for _, want := range []string{
		"outboxes.b.filter is not one boolean expression over public.outbox: argument of WHERE must be type boolean",
		"outboxes.b.unknown_when is not one boolean expression",
		"outboxes.c.filter is not one boolean expression",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "outboxes.d.filter") {
		t.Errorf("a good predicate was named: %v", err)
	}
	assertUnwritten(t, db) // prepared, never run
}

// A session turned read-write below pgx (pgconn, which no tracer sees) is
// not handed out again.
func TestFenceDestroysTaintedSessions(t *testing.T) {
	ctx, _, pool := openFenced(t, "")
	var err error
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pid1 uint32 = conn.Conn().PgConn().PID()
	if _, err := conn.Conn().PgConn().Exec(ctx, `SELECT set_config('default_transaction_read_only', 'off', false)`).ReadAll(); err != nil {
		t.Fatal(err)
	}
	conn.Release()
	conn, err = pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if conn.Conn().PgConn().PID() == pid1 {
		t.Error("the tainted session was handed out again")
	}
	if v := conn.Conn().PgConn().ParameterStatus("default_transaction_read_only"); v != "on" {
		t.Errorf("new session: default_transaction_read_only %q", v)
	}
}

// BenchmarkFence: the cost of the fence per statement, against an
// unfenced pool in the same run. Through ReadOnly the fence adds nothing
// to the explicit transaction; a statement sent outside one pays two
// round trips for the BEGIN READ ONLY and ROLLBACK around it.
//
//	go test -run XXX -bench Fence -benchtime 2000x ./internal/pg/
func BenchmarkFence(b *testing.B) {
	db := pgtest.New(b)
	ctx := context.Background()
	fenced, err := Open(ctx, &config.Database{DSN: config.Secret(db.URL), MaxConnections: 1, StatementTimeout: 5 * time.Second, LockTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer fenced.Close()
	pc, err := PoolConfig(&config.Database{DSN: config.Secret(db.URL), MaxConnections: 1, StatementTimeout: 5 * time.Second, LockTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	pc.ConnConfig.Tracer, pc.PrepareConn = nil, nil
	bare, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		b.Fatal(err)
	}
	defer bare.Close()
	var one int
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"autocommit/unfenced", func() error { return bare.QueryRow(ctx, "SELECT 1").Scan(&one) }},
		{"autocommit/fenced", func() error { return fenced.QueryRow(ctx, "SELECT 1").Scan(&one) }},
		{"ReadOnly/unfenced", func() error {
			return ReadOnly(ctx, bare, func(tx pgx.Tx) error { return tx.QueryRow(ctx, "SELECT 1").Scan(&one) })
		}},
		{"ReadOnly/fenced", func() error {
			return ReadOnly(ctx, fenced, func(tx pgx.Tx) error { return tx.QueryRow(ctx, "SELECT 1").Scan(&one) })
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := c.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The server reads strings as config.CheckPredicate does, even where the
// database's default says otherwise.
func TestStandardConformingStrings(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, "ALTER DATABASE "+db.Name+" SET standard_conforming_strings = off")
	ctx := context.Background()
	pool, err := Open(ctx, fencedPool(t, db, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var got string
	if err := ReadOnly(ctx, pool, func(tx pgx.Tx) error { return tx.QueryRow(ctx, `SELECT 'a\'`).Scan(&got) }); err != nil || got != `a\` {
		t.Errorf(`'a\' read as %q, %v`, got, err)
	}
}

// A caller cannot end the fence's transaction from inside it: strings of
// several statements and batches with a COMMIT after the first statement
// are refused, and a caller's COMMIT keeps nothing.
func TestFenceKeepsNothingCommitted(t *testing.T) {
	ctx, db, pool := openFenced(t, `CREATE TABLE written (n int); CREATE SEQUENCE seq;`)
	var err error
	if _, err := pool.Exec(ctx, `SELECT 1; COMMIT; SELECT lo_create(0)`); err == nil {
		t.Error("a string of several statements ran")
	}
	err = ReadOnly(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT 1; COMMIT; SELECT lo_create(0)`)
		return err
	})
	if err == nil {
		t.Error("a string of several statements ran inside ReadOnly")
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT 1`)
	b.Queue(`COMMIT`)
	b.Queue(`SELECT lo_create(0)`)
	if err := pool.SendBatch(ctx, b).Close(); err == nil {
		t.Error("a batch with a COMMIT ran")
	}
	// A caller's own transaction, committed: the large object it made is
	// not kept.
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT lo_create(0)`)
		return err
	})
	if err != nil {
		t.Errorf("a read-only transaction that commits: %v", err)
	}
	if _, err := pool.Exec(ctx, `SELECT lo_create(0)`); err != nil {
		t.Errorf("lo_create outside a transaction: %v", err)
	}
	assertUnwritten(t, db)
}
