package outbox

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
)

// otherWalk is what the walks of the series with "other" first that no
// read found a row of (a kept combination whose rows were all published
// as a backlog drained) have proven, so that each collection walks only
// from where the proof ends instead of through every entry again: a
// steady cursor, whose series a walk followed to the index's end, and a
// catch-up cursor, whose series are being followed there, at most a
// bounded number of entries a collection. A cursor's position is where
// its proof ends: no unpublished row folding into its series lies before
// it, for the fold it was made with (fold, a digest: a change of the
// series cap starts over). A row can still appear behind a position when
// a transaction open during the walk commits it later with an older
// created_at (a created_at defaulting to now() is its transaction's
// start): a position is only moved to the horizon the open transactions
// allow (outboxsql.HorizonQuery), with seen and seenAt the transactions
// open at the last look. A series that leaves a cursor (a read found a
// row of it) keeps where its proof ended (parked), so that once drained
// again it is walked from there, not from the start. Memory: sets of
// series keys and positions (within the series cap) and the transactions
// open at the last look.
type otherWalk struct {
	fold            string
	steady, catchUp walkCursor
	parked          map[string]outboxsql.WalkPos
	seen            []outboxsql.WalkSeen
	seenAt          int64
	looked          bool
	// server is the start time of the server run the last look saw.
	server string
}

type walkCursor struct {
	keys map[string]bool
	pos  outboxsql.WalkPos
}

func (c walkCursor) clone() walkCursor {
	return walkCursor{keys: maps.Clone(c.keys), pos: c.pos}
}

func (w *otherWalk) clone() *otherWalk {
	if w == nil {
		return &otherWalk{}
	}
	return &otherWalk{fold: w.fold, steady: w.steady.clone(), catchUp: w.catchUp.clone(), parked: maps.Clone(w.parked),
		seen: slices.Clone(w.seen), seenAt: w.seenAt, looked: w.looked, server: w.server}
}

// walkRead is one resumed walk queued in a collection.
type walkRead struct {
	cur     *walkCursor
	start   outboxsql.WalkPos
	targets [][]string
	limit   int
	got     []group
	n       pgtype.Int8
	at      pgtype.Text
}

// complete reports whether the walk passed every entry after its start.
func (w *walkRead) complete() bool { return w.n.Valid && w.n.Int64 <= int64(w.limit) }

// foldDigest identifies f: a proof holds only for the fold it was made
// with.
func foldDigest(f outboxsql.LabelFold) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%q", f))
	return string(h[:])
}

// queueWalks queues on b the walks of byTime, the series with "other"
// first no read found a row of, resumed from s's proofs (a copy, which
// the collection keeps in r.walk): the steady cursor's series from its
// position, the catch-up cursor's from its own (from since when it has
// none); a series in neither waits for the catch-up cursor to be free,
// its age a lower bound meanwhile. Each walk passes at most limit
// entries.
func (s *Sampler) queueWalks(b *pgx.Batch, spec *boundSpec, f outboxsql.LabelFold, pc *SeriesCap, byTime [][]string, since float64, limit int, r *read) []*walkRead {
	w := s.walk.clone()
	r.walk = w
	if fd := foldDigest(f); fd != w.fold {
		w.fold, w.steady, w.catchUp, w.parked = fd, walkCursor{}, walkCursor{}, nil
	}
	if w.parked == nil {
		w.parked = map[string]outboxsql.WalkPos{}
	}
	in := map[string][]string{}
	for _, t := range byTime {
		in[joinLabels(t)] = t
	}
	for _, c := range []*walkCursor{&w.steady, &w.catchUp} {
		maps.DeleteFunc(c.keys, func(k string, _ bool) bool {
			if in[k] == nil && c.pos.Set() {
				w.parked[k] = c.pos
			}
			return in[k] == nil
		})
	}
	kept := map[string]bool{}
	for _, t := range pc.Targets() {
		kept[joinLabels(t)] = true
	}
	maps.DeleteFunc(w.parked, func(k string, _ outboxsql.WalkPos) bool { return !kept[k] })
	r.lowerBound = append(r.lowerBound, w.join(in)...)
	var walks []*walkRead
	for _, c := range []*walkCursor{&w.steady, &w.catchUp} {
		if len(c.keys) == 0 {
			continue
		}
		wr := &walkRead{cur: c, start: c.pos, limit: limit}
		for _, k := range slices.Sorted(maps.Keys(c.keys)) {
			wr.targets = append(wr.targets, in[k])
		}
		q := spec.FoldResumeQuery(f, wr.targets, c.pos, since, limit)
		if q == "" {
			continue
		}
		b.Queue(q).Query(func(rows pgx.Rows) error {
			gs, err := scanGroups(rows, spec, 0, &wr.n, &wr.at)
			if err != nil {
				return fmt.Errorf("walk on to the oldest row of each series holding other no read found (capped): %w", err)
			}
			for i := range gs {
				gs[i].part = partProbeAge
			}
			wr.got = gs
			return nil
		})
		walks = append(walks, wr)
	}
	return walks
}

// settleWalks takes what the walks read: their groups join r's, the
// series a walk that stopped early did not meet are lower bounds, and
// the series a walk met leave its cursor (a row of theirs is pending
// now: the proof no longer holds for them). Then it looks at the open
// transactions (HorizonQuery) and moves each cursor to the end of its
// walk, or to the horizon when that is earlier; while the horizon is
// unknown, a cursor stays where its walk started. A catch-up walk that
// reached the end joins the steady cursor.
func (s *Sampler) settleWalks(ctx context.Context, tx pgx.Tx, spec *boundSpec, r *read, pc *SeriesCap, walks []*walkRead) error {
	if len(walks) == 0 {
		return nil
	}
	var ends []outboxsql.WalkPos
	var moving []*walkRead
	for _, wr := range walks {
		r.groups = append(r.groups, wr.got...)
		met := map[string]bool{}
		for _, g := range wr.got {
			met[foldKey(pc, g.labels)] = true
		}
		for _, t := range wr.targets {
			if k := joinLabels(t); met[k] {
				delete(wr.cur.keys, k)
				if wr.start.Set() {
					r.walk.parked[k] = wr.start
				}
			} else if !wr.complete() {
				r.lowerBound = append(r.lowerBound, t)
			}
		}
		if wr.n.Valid && wr.at.Valid {
			ends = append(ends, outboxsql.WalkPos{At: wr.at.String})
			moving = append(moving, wr)
		}
	}
	w := r.walk
	var (
		vxids  []string
		starts []pgtype.Int8
		now    int64
		known  bool
		server string
		pos    = make([]pgtype.Text, len(ends))
	)
	dest := []any{&vxids, &starts, &now, &known, &server}
	for i := range pos {
		dest = append(dest, &pos[i])
	}
	q := spec.HorizonQuery(w.seen, w.seenAt, w.looked, ends)
	if err := tx.QueryRow(ctx, q, pgx.QueryExecModeSimpleProtocol).Scan(dest...); err != nil {
		return fmt.Errorf("read the transactions open while walking to the oldest rows (capped): %w", err)
	}
	// Another server run (a failover, a restart) has its own ids: the
	// last look bounds none of its transactions.
	other := w.looked && server != w.server
	w.seen, w.seenAt, w.looked, w.server = w.seen[:0:0], now, true, server
	for i, v := range vxids {
		w.seen = append(w.seen, outboxsql.WalkSeen{VXID: v, Micro: starts[i].Int64, Known: starts[i].Valid && !other})
	}
	if other {
		return nil
	}
	if !known {
		return nil
	}
	for i, wr := range moving {
		if pos[i].Valid {
			wr.cur.pos = outboxsql.WalkPos{At: pos[i].String}
		}
	}
	return w.mergeCatchUp(ctx, tx, spec, walks)
}

// mergeCatchUp joins the catch-up cursor to the steady one once its walk
// reached the end: the steady cursor then starts from the earlier of
// their positions.
func (w *otherWalk) mergeCatchUp(ctx context.Context, tx pgx.Tx, spec *boundSpec, walks []*walkRead) error {
	var done bool
	for _, wr := range walks {
		if wr.cur == &w.catchUp && wr.complete() && w.catchUp.pos.Set() {
			done = true
		}
	}
	if !done {
		return nil
	}
	if len(w.steady.keys) > 0 {
		var first bool
		if err := tx.QueryRow(ctx, spec.WalkPosBeforeQuery(w.catchUp.pos, w.steady.pos), pgx.QueryExecModeSimpleProtocol).Scan(&first); err != nil {
			return fmt.Errorf("compare the walks' positions (capped): %w", err)
		}
		if !first {
			w.catchUp.pos = w.steady.pos
		}
	}
	if w.steady.keys == nil {
		w.steady.keys = map[string]bool{}
	}
	maps.Copy(w.steady.keys, w.catchUp.keys)
	w.steady.pos, w.catchUp = w.catchUp.pos, walkCursor{}
	return nil
}

// join puts the series of in that no cursor follows into the catch-up
// cursor when they can start where it does: any series when it starts
// from since (no position), else those parked at its position. A free
// catch-up cursor starts at the first such series' parked position (a
// short walk), else from since. It returns the series left waiting
// (lower bounds).
func (w *otherWalk) join(in map[string][]string) [][]string {
	var fresh []string
	for _, k := range slices.Sorted(maps.Keys(in)) {
		if !w.steady.keys[k] && !w.catchUp.keys[k] {
			fresh = append(fresh, k)
		}
	}
	if len(w.catchUp.keys) == 0 && len(fresh) > 0 {
		w.catchUp = walkCursor{keys: map[string]bool{}}
		for _, k := range fresh {
			if p, ok := w.parked[k]; ok {
				w.catchUp.pos = p
				break
			}
		}
	}
	var waiting [][]string
	for _, k := range fresh {
		if w.catchUp.pos.Set() && w.parked[k] != w.catchUp.pos {
			waiting = append(waiting, in[k])
			continue
		}
		w.catchUp.keys[k] = true
		delete(w.parked, k)
	}
	return waiting
}
