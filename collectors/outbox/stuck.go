package outbox

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/collectors"
	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// LastErrorChars is how many characters of last_error a stuck row shows.
const LastErrorChars = outboxsql.LastErrorChars

// MaxStuckRows bounds the limit of a Stuck call.
const MaxStuckRows = 1000

// StuckRow is one of the oldest unpublished rows, as /api/v1/stuck
// answers it.
type StuckRow struct {
	ID         string  `json:"id"`
	State      State   `json:"state"`
	AgeSeconds float64 `json:"age_seconds"`
	// AgeUnknown: the table keeps no creation time, so AgeSeconds is 0
	// for want of one, and the rows come in id order, not oldest first.
	AgeUnknown    bool              `json:"age_unknown,omitempty"`
	Attempts      int64             `json:"attempts"`
	LastError     string            `json:"last_error"`
	UnknownResult bool              `json:"unknown_result"`
	PastDeadline  bool              `json:"past_deadline"`
	Labels        map[string]string `json:"labels,omitempty"`
	// Order is set for a row out of order (order.go).
	Order *StuckOrder `json:"out_of_order,omitempty"`
}

// TrimError cuts s to at most n characters of valid UTF-8.
func TrimError(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for c := 0; c < n; c++ {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i]
}

// Stuck returns the oldest unpublished rows of outbox o, at most limit
// (1 to MaxStuckRows), oldest first. It reads through a read-only
// transaction on pool.
func Stuck(ctx context.Context, pool *pgxpool.Pool, name string, o *config.Outbox, limit int) ([]StuckRow, error) {
	return stuck(ctx, pool, name, o, limit, 0, nil)
}

// StuckBehind is Stuck for an outbox published by a replication slot
// (behind.go): its oldest rows committed after c, with a created_at at
// most lookback before it.
func StuckBehind(ctx context.Context, pool *pgxpool.Pool, name string, o *config.Outbox, limit int, lookback time.Duration, c Confirmed) ([]StuckRow, error) {
	return stuck(ctx, pool, name, o, limit, lookback, &c)
}

func stuck(ctx context.Context, pool *pgxpool.Pool, name string, o *config.Outbox, limit int, behind time.Duration, c *Confirmed) ([]StuckRow, error) {
	if limit < 1 {
		limit = 1
	}
	if limit > MaxStuckRows {
		limit = MaxStuckRows
	}
	var out []StuckRow
	err := pg.ReadOnly(ctx, pool, func(tx pgx.Tx) error {
		if c != nil {
			b := &pgx.Batch{}
			queueConfirmed(b, *c)
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return fmt.Errorf("stuck rows of outbox %q: %w", name, err)
			}
		}
		var err error
		out, err = stuckTx(ctx, tx, name, o, limit, behind)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func stuckTx(ctx context.Context, tx pgx.Tx, name string, o *config.Outbox, limit int, behind time.Duration) ([]StuckRow, error) {
	spec, err := openSpec(ctx, tx, name, o, behind)
	if err != nil {
		return nil, fmt.Errorf("stuck rows of outbox %q: %w", name, err)
	}
	rows, err := tx.Query(ctx, spec.StuckQuery(), limit)
	if err != nil {
		return nil, fmt.Errorf("stuck rows of outbox %q: %w", name, err)
	}
	defer rows.Close()
	var out []StuckRow
	nl := len(o.Labels)
	for rows.Next() {
		var (
			r      StuckRow
			f      Facts
			labels = make([]*string, nl)
		)
		dest := []any{&r.ID, &f.Status, &f.ClaimSet, &f.LeasePassed, &f.Attempted, &f.UnknownWhen}
		for i := range labels {
			dest = append(dest, &labels[i])
		}
		dest = append(dest, &r.AgeSeconds, &r.Attempts, &r.LastError)
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("stuck rows of outbox %q: %w", name, err)
		}
		r.ID = strings.ToValidUTF8(r.ID, "\uFFFD")
		r.decide(spec, f, strs(labels))
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("stuck rows of outbox %q: %w", name, err)
	}
	rows.Close()
	return withOrder(ctx, tx, spec, out, limit)
}

// decide fills in what a scanned stuck row's facts and label values say:
// its state, whether its result is unknown, its labels and whether it is
// past its deadline; and trims its last error.
func (r *StuckRow) decide(spec *boundSpec, f Facts, vals []string) {
	o := spec.O
	r.State = spec.Rules.Classify(f)
	r.UnknownResult = spec.Rules.Unknown(r.State, f)
	r.LastError = TrimError(r.LastError, LastErrorChars)
	if len(o.Labels) > 0 {
		r.Labels = map[string]string{}
		for i, l := range o.Labels {
			r.Labels[l.Name] = collectors.CutLabel(vals[i], labelLength(o))
		}
	}
	r.AgeUnknown = o.NoCreatedAt()
	r.PastDeadline = !r.AgeUnknown && r.AgeSeconds > Deadline(o, vals).Seconds()
}

// withOrder adds to the oldest rows of a stuck-rows answer the rows out
// of order (at most limit more), each with its aggregate, its sequence
// and the sequence that overtook it, and keeps the answer oldest first.
func withOrder(ctx context.Context, tx pgx.Tx, spec *boundSpec, rows []StuckRow, limit int) ([]StuckRow, error) {
	if !outboxsql.OrderEnabled(spec.O) {
		return rows, nil
	}
	o := spec.O
	res, err := tx.Query(ctx, spec.StuckOrderQuery(), limit)
	if err != nil {
		return nil, fmt.Errorf("out-of-order rows of outbox %q: %w", spec.Name, err)
	}
	defer res.Close()
	at := map[string]int{}
	for i, r := range rows {
		at[r.ID] = i
	}
	nl := len(o.Labels)
	for res.Next() {
		var (
			r      StuckRow
			f      Facts
			labels = make([]*string, nl)
			agg    *string
			seq    string
			over   string
		)
		dest := []any{&r.ID, &f.Status, &f.ClaimSet, &f.LeasePassed, &f.Attempted, &f.UnknownWhen}
		for i := range labels {
			dest = append(dest, &labels[i])
		}
		dest = append(dest, &r.AgeSeconds, &r.Attempts, &r.LastError, &agg, &seq, &over)
		if err := res.Scan(dest...); err != nil {
			return nil, fmt.Errorf("out-of-order rows of outbox %q: %w", spec.Name, err)
		}
		r.ID = strings.ToValidUTF8(r.ID, "\uFFFD")
		order := &StuckOrder{Sequence: seq, OvertakenBy: over}
		if agg != nil {
			order.Aggregate = strings.ToValidUTF8(*agg, "\uFFFD")
		}
		if i, ok := at[r.ID]; ok {
			rows[i].Order = order
			continue
		}
		r.decide(spec, f, strs(labels))
		r.Order = order
		rows = append(rows, r)
	}
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("out-of-order rows of outbox %q: %w", spec.Name, err)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].AgeSeconds > rows[j].AgeSeconds })
	return rows, nil
}

// StuckOrder is, for a stuck row out of order, its place in its
// aggregate and the published sequence that overtook it.
type StuckOrder struct {
	Aggregate   string `json:"aggregate"`
	Sequence    string `json:"sequence"`
	OvertakenBy string `json:"overtaken_by"`
}
