package main

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// The benchmark's data set: authority ids 1..rows in reconcile_bench_a
// (messages and a status-style outbox), a search index in
// reconcile_bench_b. The newest pendingRows ids are unpublished and absent
// from the index: not gaps. gapIDs picks the ids of each injected kind.
const (
	pendingRows = 1000
	perKind     = 20
)

// gap categories injected by seed; both orphan categories report
// orphan_target.
var gapCategories = []string{"missing_outbox", "missing_target", "stale_target", "orphan_target", "orphan_target"}

// gapID is the ordinal of the j-th gap of category c: spread over the key
// space, distinct, and older than the pending tail.
func gapID(c, j int) int64 { return int64(1000 + (c*perKind+j)*99991) }

// gapIDs is an SQL list of the keys of category c's gaps.
func gapIDs(c int) string {
	s := "SELECT bench_key(x) FROM unnest('{"
	for j := 0; j < perKind; j++ {
		if j > 0 {
			s += ","
		}
		s += fmt.Sprint(gapID(c, j))
	}
	return s + "}'::bigint[]) x"
}

// Key types: the key of ordinal g is bench_key(g), an SQL function
// defined in both databases: g itself for bigint keys, md5(g)::uuid for
// uuid keys (random order, as uuids are). keyName renders it as findings
// do.
var keyExprs = map[string]string{
	"bigint": "SELECT g",
	"uuid":   "SELECT md5(g::text)::uuid",
}

func keyName(keys string, g int64) string {
	if keys == "uuid" {
		sum := md5.Sum([]byte(strconv.FormatInt(g, 10)))
		h := hex.EncodeToString(sum[:])
		return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	}
	return strconv.FormatInt(g, 10)
}

func keyFunc(keys string) string {
	return "CREATE OR REPLACE FUNCTION bench_key(g bigint) RETURNS " + keys + " IMMUTABLE PARALLEL SAFE LANGUAGE sql AS $$ " + keyExprs[keys] + " $$"
}

// seeded reports whether db already holds a finished seed of rows rows.
func seeded(ctx context.Context, conn *pgx.Conn, rows int) bool {
	var n int
	err := conn.QueryRow(ctx, `SELECT rows FROM bench_meta`).Scan(&n)
	return err == nil && n == rows
}

func ensureDatabase(ctx context.Context, server *pgx.Conn, name string) error {
	var exists bool
	if err := server.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("look for database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := server.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

func execAll(ctx context.Context, conn *pgx.Conn, stmts []string) error {
	for _, s := range stmts {
		t := time.Now()
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("seed: %s: %w", s, err)
		}
		logf("  %-70.70s %6.1fs", s, time.Since(t).Seconds())
	}
	return nil
}

// Covering indexes let a sweep read every column it selects from the
// index alone (an index-only scan over a vacuumed table) instead of
// fetching each row's heap page: the advice for a production table that a
// full sweep reads. A key index that carries the version and created_at
// (the outbox's its state and created_at) is about a third of the heap
// pages plus the plain index.
const (
	coverMessages = `CREATE UNIQUE INDEX IF NOT EXISTS messages_cover ON messages (id) INCLUDE (version, created_at)`
	coverOutbox   = `CREATE INDEX IF NOT EXISTS outbox_cover ON outbox (message_id, message_version) INCLUDE (status, created_at)`
	coverIndex    = `CREATE UNIQUE INDEX IF NOT EXISTS search_index_cover ON search_index (message_id) INCLUDE (version)`
)

// ensureCovering adds the covering indexes to a seed made before they
// were part of it, and vacuums what it changed.
func ensureCovering(ctx context.Context, conn *pgx.Conn, authority bool) error {
	stmts := []string{coverIndex, `VACUUM ANALYZE search_index`}
	idx := []string{"search_index_cover"}
	if authority {
		stmts = []string{coverMessages, coverOutbox, `VACUUM ANALYZE messages`, `VACUUM ANALYZE outbox`}
		idx = []string{"messages_cover", "outbox_cover"}
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = ANY($1)`, idx).Scan(&n); err != nil {
		return fmt.Errorf("look for covering indexes: %w", err)
	}
	if n == len(idx) {
		return nil
	}
	logf("adding covering indexes")
	return execAll(ctx, conn, stmts)
}

// seedAuthority fills reconcile_bench_a: messages(id, version, created_at,
// body) one row a 0.864 s apart ending now, and an outbox with one row per
// message at its current version, published except the newest pendingRows.
func seedAuthority(ctx context.Context, conn *pgx.Conn, rows int, keys string) error {
	n := fmt.Sprint(rows)
	pend := n + ` - ` + fmt.Sprint(pendingRows)
	// One seed time for both tables: each statement is its own
	// transaction, with its own now().
	t0 := "'" + time.Now().UTC().Format(time.RFC3339Nano) + "'::timestamptz"
	return execAll(ctx, conn, []string{
		`DROP TABLE IF EXISTS bench_meta, messages, outbox`,
		keyFunc(keys),
		`CREATE UNLOGGED TABLE messages (id ` + keys + ` NOT NULL, version bigint NOT NULL, created_at timestamptz NOT NULL, body text NOT NULL)`,
		`INSERT INTO messages SELECT bench_key(g), CASE WHEN g % 7 = 0 THEN 2 ELSE 1 END, ` + t0 + ` - (` + n + ` - g) * interval '864 ms', repeat('m', 40) FROM generate_series(1, ` + n + `) g`,
		`CREATE UNLOGGED TABLE outbox (event_id bigint NOT NULL, message_id ` + keys + ` NOT NULL, message_version bigint NOT NULL, created_at timestamptz NOT NULL, status text NOT NULL, published_at timestamptz, payload text)`,
		`INSERT INTO outbox SELECT g, bench_key(g), CASE WHEN g % 7 = 0 THEN 2 ELSE 1 END, ` + t0 + ` - (` + n + ` - g) * interval '864 ms', CASE WHEN g > ` + pend + ` THEN 'PENDING' ELSE 'PUBLISHED' END, CASE WHEN g > ` + pend + ` THEN NULL ELSE ` + t0 + ` - (` + n + ` - g) * interval '864 ms' END, repeat('p', 40) FROM generate_series(1, ` + n + `) g`,
		// missing_outbox: the outbox row is gone.
		`DELETE FROM outbox WHERE message_id IN (` + gapIDs(0) + `)`,
		// stale_target: the authority and its published outbox row moved to
		// the next version; the index keeps the old one (see seedTarget).
		`UPDATE messages SET version = version + 1 WHERE id IN (` + gapIDs(2) + `)`,
		`UPDATE outbox SET message_version = message_version + 1 WHERE message_id IN (` + gapIDs(2) + `)`,
		// orphan_target (absent key): the message was deleted, its index
		// entry was not.
		`DELETE FROM messages WHERE id IN (` + gapIDs(3) + `)`,
		`DELETE FROM outbox WHERE message_id IN (` + gapIDs(3) + `)`,
		`ALTER TABLE messages ADD PRIMARY KEY (id)`,
		`CREATE INDEX ON messages (created_at)`,
		`ALTER TABLE outbox ADD PRIMARY KEY (event_id)`,
		`CREATE INDEX ON outbox (message_id, message_version)`,
		coverMessages, coverOutbox,
		`VACUUM ANALYZE messages`,
		`VACUUM ANALYZE outbox`,
		`CREATE TABLE bench_meta AS SELECT ` + n + ` AS rows`,
	})
}

// seedTarget fills reconcile_bench_b: search_index(message_id, version)
// for every published message, with the injected target gaps.
func seedTarget(ctx context.Context, conn *pgx.Conn, rows int, keys string) error {
	n := fmt.Sprint(rows)
	return execAll(ctx, conn, []string{
		`DROP TABLE IF EXISTS bench_meta, search_index`,
		keyFunc(keys),
		`CREATE UNLOGGED TABLE search_index (message_id ` + keys + ` NOT NULL, version bigint NOT NULL, indexed_at timestamptz NOT NULL DEFAULT now())`,
		`INSERT INTO search_index (message_id, version) SELECT bench_key(g), CASE WHEN g % 7 = 0 THEN 2 ELSE 1 END FROM generate_series(1, ` + n + ` - ` + fmt.Sprint(pendingRows) + `) g`,
		// missing_target: a published message never reached the index.
		`DELETE FROM search_index WHERE message_id IN (` + gapIDs(1) + `)`,
		// orphan_target (version ahead): the index holds a version the
		// authority never had.
		`UPDATE search_index SET version = version + 5 WHERE message_id IN (` + gapIDs(4) + `)`,
		`ALTER TABLE search_index ADD PRIMARY KEY (message_id)`,
		coverIndex,
		`VACUUM ANALYZE search_index`,
		`CREATE TABLE bench_meta AS SELECT ` + n + ` AS rows`,
	})
}
