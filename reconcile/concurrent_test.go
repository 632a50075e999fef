package reconcile

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// bumpAll moves every message to its next version in pipeline order:
// authority and outbox together (the outbox row published, and old enough
// to be judged, as a backfill or a long transaction would leave it), then
// the target. It also deletes one message and adds one, the same way.
func bumpAll(t *testing.T, p *pair, n int) {
	t.Helper()
	p.a.Exec(t, `WITH m AS (UPDATE messages SET version = version + 1 RETURNING id, version, created_at)
		INSERT INTO outbox (message_id, message_version, created_at, status, published_at)
		SELECT id, version, created_at, 'PUBLISHED', now() FROM m`)
	p.a.Exec(t, `DELETE FROM messages WHERE id = k($1)`, 500+n)
	p.a.Exec(t, `INSERT INTO messages (id, version, created_at) VALUES (k($1), 1, now() - interval '1 day')`, 600+n)
	p.a.Exec(t, `INSERT INTO outbox (message_id, message_version, created_at, status, published_at) VALUES (k($1), 1, now() - interval '1 day', 'PUBLISHED', now())`, 600+n)
	p.b.Exec(t, `UPDATE search_index SET version = version + 1`)
	p.b.Exec(t, `DELETE FROM search_index WHERE message_id = k($1)`, 500+n)
	p.b.Exec(t, `INSERT INTO search_index VALUES (k($1), 1)`, 600+n)
}

// TestWritesBetweenSides writes between the reads of a chunk's two sides,
// so that keys of the chunk look like gaps (target versions ahead of the
// authority page, keys the page lacks, keys deleted since the page was
// read): the re-check must clear them all.
func TestWritesBetweenSides(t *testing.T) {
	for _, c := range []struct {
		name, keyType string
		opts          []Option
	}{
		{"bigint checksums", "bigint", nil},
		{"bigint streamed", "bigint", []Option{StreamRuns()}},
		{"text", "text", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, c.keyType)
			p.addInSync(t, 1, 40)
			p.addInSync(t, 500, 519)
			s := scheduler(t, p.yaml(""), nil, c.opts...)
			calls := 0
			s.jobs["search_index"].hooks.betweenSides = func(int) {
				if calls < 20 {
					bumpAll(t, p, calls)
				}
				calls++
			}
			res, err := s.Run(context.Background(), "search_index", true)
			if err != nil {
				t.Fatal(err)
			}
			if res.TotalGaps() != 0 {
				t.Errorf("writes during the run were reported as gaps: %v %v", res.Gaps, found(res))
			}
			if res.Rechecked < 5 {
				t.Errorf("only %d keys were re-checked: the writes did not skew the chunks as the test intends", res.Rechecked)
			}
		})
	}
}

// TestConcurrentWriter runs a writer beside a sweep, in the order of a
// real pipeline: the authority row and its outbox row commit together
// (pending), the relay marks the row published, the consumer applies it
// to the target; deletions go the same way (the authority row and its
// outbox rows, then the target row). Such writes never leave a real gap,
// so any gap reported would come from the ranges' different snapshots.
// Between the two sides of every range read the run waits until the
// writer has completed more writes: a condition, never a time.
func TestConcurrentWriter(t *testing.T) {
	// uuid keys are streamed here; bigint keys' full sweeps compare
	// range summaries first.
	for _, c := range []struct {
		keyType string
		opts    []Option
	}{{"uuid", []Option{StreamRuns()}}, {"bigint", nil}, {"text", nil}} {
		t.Run(c.keyType, func(t *testing.T) { concurrentWriter(t, c.keyType, c.opts) })
	}
}

// pipelineWriter writes in pipeline order until stopped, counting the
// writes it completed.
type pipelineWriter struct {
	p *pair
	writeCount
}

func (w *pipelineWriter) step(t *testing.T, r *rand.Rand, next *int) error {
	ctx := context.Background()
	a, b := w.p.a.Admin, w.p.b.Admin
	i := 10 * (1 + r.IntN(60))
	switch r.IntN(5) {
	case 0: // a new message between the existing keys
		*next++
		i = 10*(*next%60) + 5
		if _, err := a.Exec(ctx, `WITH m AS (INSERT INTO messages (id, version, created_at) VALUES (k($1), 1, now() - interval '1 day') ON CONFLICT DO NOTHING RETURNING id, version, created_at)
			INSERT INTO outbox (message_id, message_version, created_at, status) SELECT id, version, created_at, 'PENDING' FROM m`, i); err != nil {
			return err
		}
	case 1: // a deletion: authority first, the target when it is applied
		if _, err := a.Exec(ctx, `WITH d AS (DELETE FROM messages WHERE id = k($1) RETURNING id) DELETE FROM outbox USING d WHERE message_id = d.id`, i+5); err != nil {
			return err
		}
		_, err := b.Exec(ctx, `DELETE FROM search_index WHERE message_id = k($1)`, i+5)
		return err
	default: // an update
		if _, err := a.Exec(ctx, `WITH m AS (UPDATE messages SET version = version + 1 WHERE id = k($1) RETURNING id, version, created_at)
			INSERT INTO outbox (message_id, message_version, created_at, status) SELECT id, version, created_at, 'PENDING' FROM m`, i); err != nil {
			return err
		}
	}
	// Publish: the relay marks the row sent, now.
	if _, err := a.Exec(ctx, `UPDATE outbox SET status = 'PUBLISHED', published_at = now() WHERE message_id = k($1) AND status = 'PENDING'`, i); err != nil {
		return err
	}
	// Consume and apply: the target takes the version the event carries.
	var v int64
	if err := a.QueryRow(ctx, `SELECT coalesce(max(message_version), 0) FROM outbox WHERE message_id = k($1)`, i).Scan(&v); err != nil {
		return err
	}
	if v == 0 {
		return nil
	}
	_, err := b.Exec(ctx, `INSERT INTO search_index VALUES (k($1), $2) ON CONFLICT (message_id) DO UPDATE SET version = excluded.version`, i, v)
	return err
}

func concurrentWriter(t *testing.T, keyType string, opts []Option) {
	p := newPair(t, keyType)
	for i := 1; i <= 60; i++ {
		p.add(t, 10*i, 1, old, "PUBLISHED", 1)
	}
	// chunk_time far above any chunk's time: chunks then double each step
	// (up to the test's cap) whatever the machine's speed, so the run has
	// the same number of chunks everywhere.
	s := scheduler(t, strings.Replace(p.yaml(""), "grace: 2m", "grace: 2m\n    chunk_time: 1h", 1), nil, opts...)
	w := &pipelineWriter{p: p}
	w.init()
	seen := 0
	s.jobs["search_index"].hooks.betweenSides = func(int) {
		seen += 3
		w.waitFor(seen)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(1, 2))
		next := 0
		for ctx.Err() == nil {
			err := w.step(t, r, &next)
			w.wrote(err)
			if err != nil {
				return
			}
		}
	}()
	res, err := s.Run(context.Background(), "search_index", true)
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if w.err != nil && w.err != context.Canceled {
		t.Fatalf("writer: %v", w.err)
	}
	if res.TotalGaps() != 0 {
		t.Errorf("concurrent writes were reported as gaps: %v %v", res.Gaps, found(res))
	}
	if w.writes < seen || res.Chunks < 5 {
		t.Errorf("%d writes over %d chunks (%d waited for): too few to test anything", w.writes, res.Chunks, seen)
	}
	t.Logf("%d writes during a run of %d chunks, %d keys re-checked", w.writes, res.Chunks, res.Rechecked)
}
