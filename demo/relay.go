package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// relay publishes outbox rows: it claims a batch with FOR UPDATE SKIP
// LOCKED and a lease, publishes each row, and marks it PUBLISHED only
// after the broker acknowledged it.
type relay struct {
	p    *Pipeline
	name string
	cl   *kgo.Client
}

const claimBatch = 10

// claim takes up to limit rows that are due: PENDING past their backoff,
// or CLAIMED with a lease expired for longer than ReclaimAfter (their relay
// is presumed dead). Each claimed row gets a new lease and one more attempt.
func (r *relay) claim(ctx context.Context, limit int) ([]outboxRow, error) {
	rows, err := r.p.pool.Query(ctx, `
		WITH due AS (
			SELECT event_id FROM outbox
			WHERE status IN ('PENDING', 'CLAIMED')
			  AND ((status = 'PENDING' AND (next_attempt_at IS NULL OR next_attempt_at <= now()))
			    OR (status = 'CLAIMED' AND lease_until < now() - make_interval(secs => $3)))
			  -- Per-aggregate order: a message's event waits while an
			  -- earlier version is unpublished, so that no relay overtakes
			  -- another (order.go breaks it on purpose).
			  AND NOT EXISTS (SELECT 1 FROM outbox e WHERE e.message_id = outbox.message_id
			    AND e.message_version < outbox.message_version AND e.status IN ('PENDING', 'CLAIMED'))
			ORDER BY created_at
			LIMIT $1
			FOR UPDATE SKIP LOCKED)
		UPDATE outbox o
		SET status = 'CLAIMED', claimed_by = $2, lease_until = now() + make_interval(secs => $4),
		    attempts = o.attempts + 1, next_attempt_at = NULL
		FROM due WHERE o.event_id = due.event_id
		RETURNING o.event_id, o.message_id, o.message_version, o.event_type, o.topic, o.attempts`,
		limit, r.name, r.p.opts.ReclaimAfter.Seconds(), r.p.opts.LeaseTTL.Seconds())
	if err != nil {
		return nil, fmt.Errorf("claim outbox rows: %w", err)
	}
	defer rows.Close()
	var out []outboxRow
	for rows.Next() {
		var o outboxRow
		if err := rows.Scan(&o.EventID, &o.MessageID, &o.Version, &o.EventType, &o.Topic, &o.Attempts); err != nil {
			return nil, fmt.Errorf("claim outbox rows: %w", err)
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim outbox rows: %w", err)
	}
	return out, nil
}

// markPublished records the acknowledgement, with the broker's receipt
// (partition and offset; "" when there is none), unless the lease was lost
// to another relay meanwhile.
func (r *relay) markPublished(ctx context.Context, o outboxRow, receipt string) error {
	tag, err := r.p.pool.Exec(ctx, `
		UPDATE outbox SET status = 'PUBLISHED', published_at = now(), lease_until = NULL, last_error = NULL,
		    receipt = NULLIF($4, '')
		WHERE event_id = $1 AND status = 'CLAIMED' AND claimed_by = $2 AND attempts = $3`,
		o.EventID, r.name, o.Attempts, receipt)
	if err != nil {
		return fmt.Errorf("mark %s published: %w", o.EventID, err)
	}
	if tag.RowsAffected() == 0 {
		r.p.logger.Info("relay lost its lease before marking the row published", "relay", r.name, "event_id", o.EventID)
	}
	return nil
}

// markFailed releases the row for a later retry or abandons it.
func (r *relay) markFailed(ctx context.Context, o outboxRow, unknown bool, cause error) error {
	f := decideFailure(o.Attempts, r.p.opts.MaxAttempts, unknown, r.p.opts.UnknownBackoff, cause.Error())
	_, err := r.p.pool.Exec(ctx, `
		UPDATE outbox SET status = $4, lease_until = NULL, last_error = $5,
		    next_attempt_at = CASE WHEN $6::float8 > 0 THEN now() + make_interval(secs => $6) END
		WHERE event_id = $1 AND status = 'CLAIMED' AND claimed_by = $2 AND attempts = $3`,
		o.EventID, r.name, o.Attempts, f.Status, f.LastError, f.RetryIn.Seconds())
	if err != nil {
		return fmt.Errorf("record failed publish of %s: %w", o.EventID, err)
	}
	return nil
}

// publish sends one row and waits for the acknowledgement; it returns the
// receipt the relay records: where the broker stored the record.
func (r *relay) publish(ctx context.Context, o outboxRow) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rec, err := r.cl.ProduceSync(ctx, o.record()).First()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s/%d@%d", rec.Topic, rec.Partition, rec.Offset), nil
}

// unknownResult reports whether a produce error leaves it open whether the
// broker stored the record.
func unknownResult(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kerr.RequestTimedOut) ||
		errors.Is(err, kgo.ErrRecordTimeout) || errors.Is(err, kgo.ErrRecordRetries)
}

// errAckLost is the simulated loss of an acknowledgement.
var errAckLost = errors.New("produce timed out waiting for the acknowledgement (simulated: the broker had accepted it)")

func (r *relay) run(ctx context.Context) {
	for ctx.Err() == nil {
		worked, err := r.once(ctx)
		if err != nil && ctx.Err() == nil {
			r.p.logger.Warn("relay", "relay", r.name, "err", err)
			worked = false
		}
		if !worked {
			select {
			case <-ctx.Done():
			case <-time.After(r.p.opts.PollInterval):
			}
		}
	}
}

// once claims and publishes one batch; it reports whether it found work.
func (r *relay) once(ctx context.Context) (bool, error) {
	if a := r.p.takeRelayFault(); a != nil {
		rows, err := r.claim(ctx, 1)
		if err != nil || len(rows) == 0 {
			r.p.putBackRelayFault(a)
			return false, err
		}
		return true, r.fault(ctx, a, rows[0])
	}
	rows, err := r.claim(ctx, claimBatch)
	if err != nil || len(rows) == 0 {
		return false, err
	}
	for _, o := range rows {
		receipt, err := r.publish(ctx, o)
		if err != nil {
			if ctx.Err() != nil {
				return true, nil // shutting down: the lease will expire
			}
			r.p.logger.Warn("relay: publish failed", "relay", r.name, "event_id", o.EventID, "err", err)
			if err := r.markFailed(ctx, o, unknownResult(err), err); err != nil {
				return true, err
			}
			continue
		}
		if err := r.markPublished(ctx, o, receipt); err != nil {
			return true, err
		}
	}
	return true, nil
}

// fault carries out a relay fault on the claimed row o.
func (r *relay) fault(ctx context.Context, a *armedFault, o outboxRow) (err error) {
	switch a.kind {
	case FaultOrderOvertaken:
		return r.overtaken(ctx, a, o)
	case FaultMarkedByHand:
		return r.markedByHand(ctx, a, o)
	}
	rec := FaultRecord{At: time.Now(), EventIDs: []string{o.EventID}, MessageIDs: []int64{o.MessageID}}
	defer func() { a.done <- faultResult{rec: rec, err: err} }()
	switch a.kind {
	case FaultRelayCrash:
		// Crash: the row stays CLAIMED with a lease nobody renews.
		return nil
	case FaultMarkBeforeSend:
		// Mark first, then crash before sending: no receipt to record.
		return r.markPublished(ctx, o, "")
	case FaultAckLost:
		if _, err := r.publish(ctx, o); err != nil {
			return r.markFailed(ctx, o, unknownResult(err), err)
		}
		return r.markFailed(ctx, o, true, errAckLost)
	}
	return fmt.Errorf("relay fault %q: not a relay fault", a.kind)
}
