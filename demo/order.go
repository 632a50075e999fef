package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The demo's relays keep per-message order: a message's event is claimed
// only once no earlier version of it is unpublished (relay.go). The
// order_overtaken fault breaks it the way two relays do: relay R1 claims
// E9 and stalls; the writer commits E10 after it; relay R2, an older
// relay that claims any due row, takes E10 and publishes it. Consumers get
// E10 first. The marked_by_hand fault is a row marked sent by hand,
// without the downstream's receipt.

// waitOvertaken bounds how long the fault waits for R2 to publish E10.
const waitOvertaken = 30 * time.Second

// overtaken carries out FaultOrderOvertaken on the claimed row o (E9). It
// reports the fault as soon as E10 is published, while E9 is still held,
// then keeps holding E9 (renewing its lease, as a stalled but live relay
// does) for OrderStallFor before it publishes it.
func (r *relay) overtaken(ctx context.Context, a *armedFault, o outboxRow) error {
	rec := FaultRecord{At: time.Now(), EventIDs: []string{o.EventID}, MessageIDs: []int64{o.MessageID}}
	next, err := r.overtake(ctx, o)
	if err != nil {
		a.done <- faultResult{rec: rec, err: err}
		// Let the row go: the pipeline publishes it in order.
		return r.markFailed(context.WithoutCancel(ctx), o, false, err)
	}
	rec.EventIDs = append(rec.EventIDs, next.EventID)
	a.done <- faultResult{rec: rec}

	until := time.Now().Add(r.p.opts.OrderStallFor)
	for time.Now().Before(until) {
		select {
		case <-ctx.Done():
			return nil // shutting down: the lease will expire
		case <-time.After(min(time.Until(until), r.p.opts.LeaseTTL/3)):
		}
		if err := r.renewLease(ctx, o); err != nil {
			return err
		}
	}
	receipt, err := r.publish(ctx, o)
	if err != nil {
		return r.markFailed(ctx, o, unknownResult(err), err)
	}
	return r.markPublished(ctx, o, receipt)
}

// overtake commits the next version of o's message (as a writer does)
// and has a second relay, one that ignores per-message order, claim and
// publish it. It returns that row once it is published.
func (r *relay) overtake(ctx context.Context, o outboxRow) (outboxRow, error) {
	var next outboxRow
	err := pgx.BeginFunc(ctx, r.p.pool, func(tx pgx.Tx) error {
		var err error
		next, err = editMessage(ctx, tx, o.MessageID, o.Topic)
		return err
	})
	if err != nil {
		return next, fmt.Errorf("commit the next version of message %d: %w", o.MessageID, err)
	}
	r2 := &relay{p: r.p, name: r.name + "-unordered", cl: r.cl}
	deadline := time.Now().Add(waitOvertaken)
	for {
		claimed, err := r2.claimEvent(ctx, next.EventID)
		if err != nil {
			return next, err
		}
		if claimed != nil {
			receipt, err := r2.publish(ctx, *claimed)
			if err != nil {
				return next, fmt.Errorf("publish %s ahead of %s: %w", next.EventID, o.EventID, err)
			}
			return next, r2.markPublished(ctx, *claimed, receipt)
		}
		if time.Now().After(deadline) {
			return next, fmt.Errorf("the second relay could not claim %s within %s", next.EventID, waitOvertaken)
		}
		select {
		case <-ctx.Done():
			return next, ctx.Err()
		case <-time.After(r.p.opts.PollInterval):
		}
	}
}

// claimEvent claims one pending row by id, whatever the order of its
// message's other events: how a relay without per-aggregate claiming
// takes a due row. nil when the row is not pending.
func (r *relay) claimEvent(ctx context.Context, eventID string) (*outboxRow, error) {
	var o outboxRow
	err := r.p.pool.QueryRow(ctx, `
		UPDATE outbox SET status = 'CLAIMED', claimed_by = $2, lease_until = now() + make_interval(secs => $3),
		    attempts = attempts + 1, next_attempt_at = NULL
		WHERE event_id = $1 AND status = 'PENDING'
		RETURNING event_id, message_id, message_version, event_type, topic, attempts`,
		eventID, r.name, r.p.opts.LeaseTTL.Seconds()).Scan(&o.EventID, &o.MessageID, &o.Version, &o.EventType, &o.Topic, &o.Attempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", eventID, err)
	}
	return &o, nil
}

// renewLease extends the lease of a row the relay still holds.
func (r *relay) renewLease(ctx context.Context, o outboxRow) error {
	_, err := r.p.pool.Exec(ctx, `UPDATE outbox SET lease_until = now() + make_interval(secs => $4)
		WHERE event_id = $1 AND status = 'CLAIMED' AND claimed_by = $2 AND attempts = $3`,
		o.EventID, r.name, o.Attempts, r.p.opts.LeaseTTL.Seconds())
	if err != nil {
		return fmt.Errorf("renew the lease of %s: %w", o.EventID, err)
	}
	return nil
}

// markedByHand carries out FaultMarkedByHand on the claimed row o: the
// relay sends it, and before it records the downstream's receipt an
// operator, seeing the row claimed, marks it PUBLISHED by hand. The
// relay's own mark then finds the row taken from it. Here the downstream
// has the event; the exporter cannot know that, and only the missing
// receipt shows the row was marked without confirmation.
func (r *relay) markedByHand(ctx context.Context, a *armedFault, o outboxRow) (err error) {
	rec := FaultRecord{At: time.Now(), EventIDs: []string{o.EventID}, MessageIDs: []int64{o.MessageID}}
	defer func() { a.done <- faultResult{rec: rec, err: err} }()
	receipt, err := r.publish(ctx, o)
	if err != nil {
		return r.markFailed(ctx, o, unknownResult(err), err)
	}
	if _, err := r.p.pool.Exec(ctx, `UPDATE outbox SET status = 'PUBLISHED', published_at = now(), lease_until = NULL
		WHERE event_id = $1`, o.EventID); err != nil {
		return fmt.Errorf("mark %s published by hand: %w", o.EventID, err)
	}
	return r.markPublished(ctx, o, receipt)
}

// describeOrder is the announcement of the order and receipt faults.
func describeOrder(r FaultRecord, o Options) string {
	if r.Kind == FaultOrderOvertaken {
		late, ahead := "(none)", "(none)"
		if len(r.EventIDs) == 2 {
			late, ahead = r.EventIDs[0], r.EventIDs[1]
		}
		return fmt.Sprintf("A relay claimed event %s of message %s and stalls on it; the message's next version, event %s, "+
			"was committed after it and another relay, one that does not keep per-message order, published it first. "+
			"Consumers get the new version before the old one. The stalled relay publishes %s in %s.",
			late, msgIDs(r), ahead, late, o.OrderStallFor)
	}
	return fmt.Sprintf("A relay sent event %s, and before it recorded the broker's receipt an operator marked the row PUBLISHED by hand. "+
		"This time the event did arrive, but nothing in the row shows it: a row marked by hand without confirming downstream "+
		"hides a loss just as well.", ids(r))
}
