package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/reconcile"
)

// naiveMaps is the baseline: read all of both sides into Go maps and
// compare, the way a first script would.
func naiveMaps(ctx context.Context, a, b *pgxpool.Pool) ([]reconcile.Finding, int64, error) {
	type arow struct {
		v   int64
		st  reconcile.OutboxState
		old bool
	}
	auth := map[int64]arow{}
	rows, err := a.Query(ctx, `SELECT m.id, m.version, m.created_at < now() - interval '2 minutes',
		CASE WHEN o.status IS NULL THEN 1 WHEN o.status = 'PUBLISHED' THEN 3 ELSE 2 END, o.created_at < now() - interval '2 minutes'
		FROM messages m LEFT JOIN outbox o ON o.message_id = m.id AND o.message_version = m.version`)
	if err != nil {
		return nil, 0, fmt.Errorf("naive: read authority: %w", err)
	}
	var judged int64
	for rows.Next() {
		var id, v int64
		var old bool
		var st int
		var obOld *bool
		if err := rows.Scan(&id, &v, &old, &st, &obOld); err != nil {
			return nil, 0, err
		}
		if !old {
			continue
		}
		judged++
		auth[id] = arow{v: v, st: reconcile.OutboxState(st), old: obOld != nil && *obOld}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	target := map[int64]int64{}
	rows, err = b.Query(ctx, `SELECT message_id, version FROM search_index`)
	if err != nil {
		return nil, 0, fmt.Errorf("naive: read target: %w", err)
	}
	for rows.Next() {
		var id, v int64
		if err := rows.Scan(&id, &v); err != nil {
			return nil, 0, err
		}
		target[id] = v
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	var out []reconcile.Finding
	for id, a := range auth {
		tv, inT := target[id]
		for _, k := range reconcile.Classify(reconcile.Observation{InAuthority: true, Version: a.v, Judged: true, Outbox: a.st, OutboxJudged: a.old, HasTarget: true, InTarget: inT, TargetVersion: tv}) {
			out = append(out, reconcile.Finding{Key: fmt.Sprint(id), Kind: k})
		}
	}
	for id := range target {
		if _, ok := auth[id]; !ok {
			out = append(out, reconcile.Finding{Key: fmt.Sprint(id), Kind: reconcile.OrphanTarget})
		}
	}
	return out, judged, nil
}
