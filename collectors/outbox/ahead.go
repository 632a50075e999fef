package outbox

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// Reads sent ahead. While an outbox stays capped, the reads that follow
// its first batch (those of the deadline overrides, the count and the
// walks of the claimed rows, the unknown results, the probes of the
// series the walks missed) mostly repeat from one sample to the next,
// and each batch of them waits for the answers of the one before. So a
// sample sends, at the end of its first batch, the follow-up reads the
// last sample sent, by their text: the server reads them while the
// exporter reads the first answers. A follow-up that queues the same
// text takes the answer read ahead; one whose text differs (the outbox
// changed) is sent as before, and an answer no follow-up takes is
// dropped. Only reads bounded by max_count go ahead, never the per label
// set skip-scans, whose cost grows with the number of combinations. The
// transaction reads committed data, each statement as of its own start,
// so a read sent earlier in it is as true as one sent later.

// aheadRead is a follow-up read that the next sample may send ahead.
type aheadRead struct {
	sql string
	// count: the count of the claimed rows, else a state-shaped read.
	count bool
	// probe: its text holds label values; sent unprepared.
	probe bool
	// groups is how many groups it returned.
	groups int
}

// aheadAnswer is what a read sent ahead returned.
type aheadAnswer struct {
	groups []group
	count  int64
	// isCount: count holds the answer, else groups.
	isCount bool
}

// queueAhead queues on b, the first batch, the follow-up reads of the
// last sample (s.ahead); their answers wait in r.ahead for follow.
func (s *Sampler) queueAhead(b *pgx.Batch, spec *boundSpec, r *read) {
	if len(s.ahead) == 0 {
		return
	}
	r.ahead = make(map[string]*aheadAnswer, len(s.ahead))
	for _, a := range s.ahead {
		ans := &aheadAnswer{isCount: a.count}
		r.ahead[a.sql] = ans
		var args []any
		if a.probe {
			args = []any{pg.Unprepared}
		}
		if a.count {
			b.Queue(a.sql, args...).QueryRow(func(row pgx.Row) error {
				if err := row.Scan(&ans.count); err != nil {
					return fmt.Errorf("count claimed rows (capped, sent ahead): %w", err)
				}
				return nil
			})
			continue
		}
		b.Queue(a.sql, args...).Query(func(rows pgx.Rows) (err error) {
			if ans.groups, err = scanGroups(rows, spec, a.groups); err != nil {
				return fmt.Errorf("a capped read sent ahead: %w", err)
			}
			return nil
		})
	}
}

// follow is queueGroups for a follow-up read that the next sample may
// send ahead: it takes the answer a.sql got ahead in this sample, if
// any, or queues it on b.
func (r *read) follow(b *pgx.Batch, a aheadRead, spec *boundSpec, p part, dst *[]group, what string) {
	i := len(r.sent)
	r.sent = append(r.sent, a)
	ans, ok := r.ahead[a.sql]
	if !ok || ans.isCount {
		queueSized(b, a.sql, spec, p, dst, what, 0, func(n int) { r.sent[i].groups = n })
		return
	}
	delete(r.ahead, a.sql)
	r.sent[i].groups = len(ans.groups)
	for i := range ans.groups {
		ans.groups[i].part = p
	}
	addGroups(dst, ans.groups)
}

// followCount reads the count of the claimed rows into r.claimedCount,
// as follow.
func (r *read) followCount(b *pgx.Batch, q string) {
	a := aheadRead{sql: q, count: true}
	r.sent = append(r.sent, a)
	if ans, ok := r.ahead[q]; ok && ans.isCount {
		delete(r.ahead, q)
		r.claimedCount = ans.count
		return
	}
	b.Queue(q).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&r.claimedCount); err != nil {
			return fmt.Errorf("count claimed rows (capped): %w", err)
		}
		return nil
	})
}
