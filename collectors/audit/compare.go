package audit

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

func (a *Auditor) compareLoop(ctx context.Context) {
	for {
		// Until the first comparison, look every second whether the
		// window has been read, so the gauges appear soon after a start.
		wait := a.interval
		if !a.Stats().Compared {
			wait = min(wait, time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if !a.Ready() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, a.interval)
		if err := a.Compare(cctx); err != nil && ctx.Err() == nil {
			a.logger.Error("compare outbox with topics", "err", err)
		}
		cancel()
	}
}

// Compare judges the sampled rows in scope now. Before the tailer has
// read the window it judges nothing and returns nil. It first waits until
// the tailer has read every record the topics held when it began, so a
// tailer that fell behind makes it fail (and keep the last findings)
// rather than report the records it has not read yet as lost.
func (a *Auditor) Compare(ctx context.Context) error {
	a.cmpMu.Lock()
	defer a.cmpMu.Unlock()
	if !a.Ready() {
		return nil
	}
	if a.pool == nil {
		return fmt.Errorf("compare outbox %q: no database pool", a.name)
	}
	err := a.compare(ctx)
	a.mu.Lock()
	a.cmpErr = err
	a.mu.Unlock()
	return err
}

type outboxRow struct {
	id          string
	class       Class
	publishedAt *time.Time
	createdAt   time.Time
}

// judging is one comparison in progress.
type judging struct {
	at        time.Time
	from      time.Time // rows published before are out of scope
	res       *result
	checked   uint64
	firstSeen map[string]time.Time
	probe     *matchProbe
}

// compare streams the rows in scope and judges each as it arrives, so its
// memory is the findings, not the rows.
func (a *Auditor) compare(ctx context.Context) error {
	at := a.clock()
	if err := a.waitCaughtUp(ctx); err != nil {
		return fmt.Errorf("compare outbox %q: %w", a.name, err)
	}
	a.mu.Lock()
	start := at.Add(-a.cfg.Window)
	if tf := time.UnixMilli(a.tailerFrom()); tf.After(start) {
		start = tf
	}
	recent := a.recent
	a.mu.Unlock()
	j := &judging{at: at, from: start.Add(a.cfg.Grace), res: &result{at: at, span: max(at.Sub(start), 0)},
		firstSeen: map[string]time.Time{}}
	j.probe = newMatchProbe(recent[:], j.from.UnixMilli(), at.Add(-a.cfg.Grace).UnixMilli())
	err := pg.ReadOnly(ctx, a.pool, func(tx pgx.Tx) error {
		var args []any
		if strings.Contains(a.query, "$1") {
			args = append(args, j.from)
		}
		rows, err := tx.Query(ctx, a.query, args...)
		if err != nil {
			return fmt.Errorf("query outbox %q: %w", a.name, err)
		}
		defer rows.Close()
		for rows.Next() {
			var r outboxRow
			var class int32
			if err := rows.Scan(&r.id, &class, &r.publishedAt, &r.createdAt); err != nil {
				return fmt.Errorf("read outbox %q: %w", a.name, err)
			}
			r.class = Class(class)
			a.judge(j, r)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read outbox %q: %w", a.name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	j.res.match = j.probe.stats
	j.res.mismatch = j.probe.verdict()
	a.firstSeen = j.firstSeen
	a.checkedUpTo = at
	if m := j.res.mismatch; m != "" && m != a.mismatchLog {
		a.logger.Warn("audit ids do not match: the missing count is withheld", "mismatch", m)
	}
	a.mismatchLog = j.res.mismatch
	sortFindings(j.res.missing)
	sortFindings(j.res.unmarked)
	sortFindings(j.res.dead)
	a.mu.Lock()
	a.result = j.res
	a.checked += j.checked
	a.mu.Unlock()
	return nil
}

// judge compares one row with the window and adds it to the findings.
func (a *Auditor) judge(j *judging, r outboxRow) {
	h, fp := Digest([]byte(r.id))
	if !a.sampler.Sampled(h) {
		return
	}
	a.mu.Lock()
	end, onTopic := a.win.lookup(fp)
	a.mu.Unlock()
	o := Observation{ID: r.id, Class: r.class, OnTopic: onTopic}
	if onTopic {
		o.OnTopicAt = time.UnixMilli(end)
	}
	if r.class == Published {
		if r.publishedAt != nil {
			o.MarkedAt = *r.publishedAt
		} else {
			// Without published_at, a row counts as marked when this
			// process first saw it published; kept only while absent.
			o.MarkedAt = j.at
			if t, ok := a.firstSeen[r.id]; ok {
				o.MarkedAt = t
			}
			if !onTopic {
				j.firstSeen[r.id] = o.MarkedAt
			}
		}
	}
	if judged := r.createdAt.Add(a.cfg.Grace); judged.After(a.checkedUpTo) && !judged.After(j.at) {
		j.checked++
	}
	v := Judge(o, j.at, a.cfg.Grace)
	j.probe.row(r.id, r.class, v)
	res := j.res
	switch v {
	case MissingInBroker:
		res.nMissing++
		if len(res.missing) < MaxFindings {
			res.missing = append(res.missing, finding(r, o))
		}
	case UnmarkedInBroker:
		res.nUnmark++
		if len(res.unmarked) < MaxFindings {
			res.unmarked = append(res.unmarked, finding(r, o))
		}
	case DeadInBroker:
		res.nDead++
		if len(res.dead) < MaxFindings {
			res.dead = append(res.dead, finding(r, o))
		}
	}
}

func finding(r outboxRow, o Observation) Finding {
	f := Finding{ID: r.id, State: r.class.String(), CreatedAt: r.createdAt.UTC()}
	if r.publishedAt != nil {
		t := r.publishedAt.UTC()
		f.PublishedAt = &t
	}
	if o.OnTopic {
		t := o.OnTopicAt.UTC()
		f.OnTopicBy = &t
	}
	return f
}

func sortFindings(fs []Finding) {
	sort.Slice(fs, func(i, j int) bool { return fs[i].ID < fs[j].ID })
}
