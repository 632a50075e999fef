package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Consumer groups of the demo.
const (
	GroupSearchIndex = "search-index"
	GroupNotify      = "notify"
)

// consume runs one consumer group member: poll, apply, commit. It stops
// polling while the group is stalled by a fault, so its committed offsets
// stay behind and its lag grows.
func (p *Pipeline) consume(ctx context.Context, group string, cl *kgo.Client, apply func(context.Context, []*kgo.Record) error) {
	for ctx.Err() == nil {
		if p.stalled(group) {
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollRecords(pctx, 200)
		cancel()
		if fetches.IsClientClosed() || ctx.Err() != nil {
			return
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				p.logger.Warn("consumer fetch", "group", group, "topic", topic, "partition", partition, "err", err)
			}
		})
		recs := fetches.Records()
		if len(recs) == 0 {
			continue
		}
		// At least once: retry the batch until it applies, then commit.
		for {
			err := apply(ctx, recs)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			p.logger.Warn("consumer apply", "group", group, "err", err)
			sleep(ctx, time.Second)
		}
		if err := cl.CommitRecords(ctx, recs...); err != nil && ctx.Err() == nil {
			p.logger.Warn("consumer commit", "group", group, "err", err)
		}
	}
}

// indexRecords upserts search_index rows: a row only moves to a newer
// version, so duplicates and late old versions change nothing.
func (p *Pipeline) indexRecords(ctx context.Context, recs []*kgo.Record) error {
	for _, r := range recs {
		e, err := decodeEvent(r.Value)
		if err != nil {
			p.logger.Warn("search-index: skipping a record that is not an event", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
			continue
		}
		if _, err := p.pool.Exec(ctx, `
			INSERT INTO search_index (message_id, version, event_id, indexed_at) VALUES ($1, $2, $3, now())
			ON CONFLICT (message_id) DO UPDATE
			SET version = EXCLUDED.version, event_id = EXCLUDED.event_id, indexed_at = EXCLUDED.indexed_at
			WHERE search_index.version < EXCLUDED.version`, e.MessageID, e.Version, e.EventID); err != nil {
			return fmt.Errorf("index message %d v%d: %w", e.MessageID, e.Version, err)
		}
	}
	return nil
}

// notifyRecords simulates sending a notification per event.
func (p *Pipeline) notifyRecords(_ context.Context, recs []*kgo.Record) error {
	p.mu.Lock()
	p.notified += len(recs)
	p.mu.Unlock()
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
