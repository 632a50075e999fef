package demo

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// outboxRow is one outbox row as relays and writers see it.
type outboxRow struct {
	EventID   string
	MessageID int64
	Version   int
	EventType string
	Topic     string
	Attempts  int
}

// newEventID returns a random UUID (version 4) in its canonical text form.
func newEventID() string { return uuid.NewString() }

var words = strings.Fields("ship the outbox before lunch ping me when the index is back the relay looks fine now who paid for the order")

// body is a short made-up message text.
func body() string {
	n := 3 + mrand.IntN(5)
	w := make([]string, n)
	for i := range w {
		w[i] = words[mrand.IntN(len(words))]
	}
	return strings.Join(w, " ")
}

// insertMessage writes a new message and its outbox row in tx.
func insertMessage(ctx context.Context, tx pgx.Tx, topic string) (outboxRow, error) {
	r := outboxRow{EventID: newEventID(), Version: 1, EventType: eventType(1), Topic: topic}
	if err := tx.QueryRow(ctx, `INSERT INTO messages (body) VALUES ($1) RETURNING id`, body()).Scan(&r.MessageID); err != nil {
		return r, fmt.Errorf("insert message: %w", err)
	}
	return r, insertOutbox(ctx, tx, r)
}

// editMessage bumps a message's version and writes the outbox row of the
// new version in tx.
func editMessage(ctx context.Context, tx pgx.Tx, id int64, topic string) (outboxRow, error) {
	r := outboxRow{EventID: newEventID(), MessageID: id, Topic: topic}
	err := tx.QueryRow(ctx, `UPDATE messages SET version = version + 1, body = $2, updated_at = now() WHERE id = $1 RETURNING version`, id, body()).Scan(&r.Version)
	if err != nil {
		return r, fmt.Errorf("edit message %d: %w", id, err)
	}
	r.EventType = eventType(r.Version)
	return r, insertOutbox(ctx, tx, r)
}

func insertOutbox(ctx context.Context, tx pgx.Tx, r outboxRow) error {
	_, err := tx.Exec(ctx, `INSERT INTO outbox (event_id, message_id, message_version, event_type, topic, status)
		VALUES ($1, $2, $3, $4, $5, 'PENDING')`, r.EventID, r.MessageID, r.Version, r.EventType, r.Topic)
	if err != nil {
		return fmt.Errorf("insert outbox row for message %d v%d: %w", r.MessageID, r.Version, err)
	}
	return nil
}

// write is the writer loop: Rate times a second it creates a message or
// edits a recent one, each with its outbox row in one transaction.
func (p *Pipeline) write(ctx context.Context) {
	if p.opts.Rate <= 0 {
		return
	}
	t := time.NewTicker(time.Duration(float64(time.Second) / p.opts.Rate))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := p.writeOne(ctx); err != nil && ctx.Err() == nil {
			p.logger.Warn("writer", "err", err)
		}
	}
}

func (p *Pipeline) writeOne(ctx context.Context) error {
	if p.writersPaused.Load() {
		return nil
	}
	edit := int64(0)
	if mrand.Float64() < p.opts.EditShare {
		p.mu.Lock()
		id, ok := p.recent.pick(mrand.IntN(max(1, len(p.recent.ids))))
		p.mu.Unlock()
		if ok {
			edit = id
		}
	}
	var created int64
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if edit != 0 {
			_, err := editMessage(ctx, tx, edit, p.opts.Topic)
			return err
		}
		r, err := insertMessage(ctx, tx, p.opts.Topic)
		created = r.MessageID
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // the message was removed meanwhile
	}
	if err != nil {
		return err
	}
	if created != 0 {
		p.mu.Lock()
		p.recent.add(created)
		p.mu.Unlock()
	}
	return nil
}
