package reconcile

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
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
			for i := 1; i <= 40; i++ {
				p.add(t, i, 1, old, "PUBLISHED", 1)
			}
			for i := 500; i < 520; i++ {
				p.add(t, i, 1, old, "PUBLISHED", 1)
			}
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

// TestConcurrentWriter runs a writer beside a slowed sweep: it updates and
// inserts messages in an order that never leaves a real gap (authority and
// outbox pending, then target, then published), so any gap reported would
// come from the chunks' different snapshots.
func TestConcurrentWriter(t *testing.T) {
	// uuid keys are streamed; bigint keys' full sweeps compare range
	// summaries first.
	for _, keyType := range []string{"uuid", "bigint"} {
		t.Run(keyType, func(t *testing.T) { concurrentWriter(t, keyType) })
	}
}

func concurrentWriter(t *testing.T, keyType string) {
	p := newPair(t, keyType)
	for i := 1; i <= 60; i++ {
		p.add(t, i, 1, old, "PUBLISHED", 1)
	}
	s := scheduler(t, p.yaml(""), nil)
	// Reading the sides one after the other with a pause between lets the
	// writer's commits fall between them.
	s.jobs["search_index"].hooks.betweenSides = func(int) { time.Sleep(30 * time.Millisecond) }

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	writes := 0
	go func() {
		defer wg.Done()
		next := 1000
		for ctx.Err() == nil {
			i := 1 + rand.IntN(60)
			if rand.IntN(4) == 0 {
				i, next = next, next+1
				p.a.Exec(t, `INSERT INTO messages (id, version, created_at) VALUES (k($1), 0, now() - interval '1 day')`, i)
				p.b.Exec(t, `INSERT INTO search_index VALUES (k($1), 0)`, i)
			}
			var ob int64
			err := p.a.Admin.QueryRow(context.Background(), `WITH m AS (UPDATE messages SET version = version + 1 WHERE id = k($1) RETURNING id, version, created_at)
				INSERT INTO outbox (message_id, message_version, created_at, status) SELECT id, version, created_at, 'PENDING' FROM m RETURNING event_id`, i).Scan(&ob)
			if err != nil {
				t.Error(err)
				return
			}
			p.b.Exec(t, `UPDATE search_index SET version = version + 1 WHERE message_id = k($1)`, i)
			p.a.Exec(t, `UPDATE outbox SET status = 'PUBLISHED', published_at = now() WHERE event_id = $1`, ob)
			writes++
		}
	}()
	res, err := s.Run(context.Background(), "search_index", true)
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if res.TotalGaps() != 0 {
		t.Errorf("concurrent writes were reported as gaps: %v %v", res.Gaps, found(res))
	}
	if writes < 10 || res.Chunks < 5 {
		t.Errorf("%d writes over %d chunks: too few to test anything", writes, res.Chunks)
	}
	t.Logf("%d writes during a run of %d chunks, %d keys re-checked", writes, res.Chunks, res.Rechecked)
}
