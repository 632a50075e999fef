package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// checksumBoth sums hashint8extended(key, version) (uuid_hash_extended for
// uuid keys) over both sides whole, concurrently: the floor of any summary
// comparison.
func checksumBoth(ctx context.Context, a, b *pgxpool.Pool, keys string) (int64, error) {
	hash := "hashint8extended"
	if keys == "uuid" {
		hash = "uuid_hash_extended"
	}
	var na, nb int64
	var sa, sb string
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return a.QueryRow(gctx, `SELECT count(*), coalesce(sum(`+hash+`(id, version)), 0)::text FROM messages`).Scan(&na, &sa)
	})
	g.Go(func() error {
		return b.QueryRow(gctx, `SELECT count(*), coalesce(sum(`+hash+`(message_id, version)), 0)::text FROM search_index`).Scan(&nb, &sb)
	})
	if err := g.Wait(); err != nil {
		return 0, fmt.Errorf("checksum: %w", err)
	}
	return na, nil
}

// joinWhole runs the authority-outbox join over the whole table in one
// query, with the merge plan reconcile forces or the planner's default.
func joinWhole(ctx context.Context, a *pgxpool.Pool, merge bool) (int64, error) {
	var n int64
	err := pgx.BeginTxFunc(ctx, a, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if merge {
			if _, err := tx.Exec(ctx, "SET LOCAL enable_hashjoin = off; SET LOCAL enable_nestloop = off; SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL jit = off"); err != nil {
				return err
			}
		}
		return tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT a.id, a.version, a.created_at < now(), o.st
			FROM messages a LEFT JOIN (SELECT message_id AS k, message_version AS v, CASE WHEN status IN ('PUBLISHED') THEN 3 ELSE 2 END AS st FROM outbox) o
			ON o.k = a.id AND o.v = a.version OFFSET 0) s`).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("join whole: %w", err)
	}
	return n, nil
}
