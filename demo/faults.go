package demo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// FaultKind names one scripted failure of the pipeline.
type FaultKind string

// The faults the demo injects, in the order it injects them.
const (
	// FaultRelayCrash: a relay claims a row and dies before publishing
	// it (crash point C3). The row stays CLAIMED until its lease expires and
	// a relay takes it back.
	FaultRelayCrash FaultKind = "relay_crash"
	// FaultAckLost: the broker accepts the event but the relay never gets
	// the acknowledgement (C5). It records an unknown result and retries
	// later, which puts the event on the topic twice.
	FaultAckLost FaultKind = "ack_lost"
	// FaultMarkBeforeSend: a relay marks a row PUBLISHED before sending it
	// and dies: the row says published, the topic never sees it.
	FaultMarkBeforeSend FaultKind = "mark_before_send"
	// FaultConsumerStall: the notify group stops consuming for longer than
	// its lag deadline.
	FaultConsumerStall FaultKind = "consumer_stall"
	// FaultIndexRowLost: a search_index row of a published message is
	// deleted.
	FaultIndexRowLost FaultKind = "index_row_lost"
	// FaultMissingOutbox: a message commits without its outbox row.
	FaultMissingOutbox FaultKind = "missing_outbox"
	// FaultRollbackAfterPublish: an event is published from inside a
	// transaction that then rolls back; the indexer indexes a message that
	// does not exist.
	FaultRollbackAfterPublish FaultKind = "rollback_after_publish"
	// FaultOrderOvertaken: a relay stalls on a message's event while
	// another relay, one that does not keep per-message order, publishes
	// the message's next version: two relays invert the order of E9 and
	// E10. See order.go.
	FaultOrderOvertaken FaultKind = "order_overtaken"
	// FaultMarkedByHand: an operator marks a row PUBLISHED by hand before
	// its relay recorded the downstream's receipt.
	FaultMarkedByHand FaultKind = "marked_by_hand"
)

// FaultKinds lists every fault in the order the demo injects them.
var FaultKinds = []FaultKind{
	FaultRelayCrash, FaultAckLost, FaultMarkBeforeSend, FaultConsumerStall,
	FaultIndexRowLost, FaultMissingOutbox, FaultRollbackAfterPublish,
	FaultOrderOvertaken, FaultMarkedByHand,
}

// FaultRecord is one injected fault: what, when, and which ids carry its
// trace.
type FaultRecord struct {
	Kind FaultKind
	At   time.Time
	// EventIDs are the outbox event ids the fault touched.
	EventIDs []string
	// MessageIDs are the messages the fault touched.
	MessageIDs []int64
	// Group and Until are set for a consumer stall.
	Group string
	Until time.Time
	// Metrics names the exporter metrics that show the fault.
	Metrics []string
}

// Metrics returns the exporter metrics that show a fault of kind k.
func (k FaultKind) Metrics() []string {
	switch k {
	case FaultRelayCrash:
		return []string{series(vocab.OutboxEvents, vocab.LabelState, vocab.StateLeaseExpired), vocab.OutboxLeaseExpirations, vocab.OutboxUnknownResult, vocab.OutboxPastDeadline}
	case FaultAckLost:
		return []string{vocab.OutboxUnknownResult, vocab.OutboxRetried, vocab.AuditUnmarkedInBroker, vocab.AuditDuplicates, vocab.OutboxPastDeadline}
	case FaultMarkBeforeSend:
		// stale_target instead when the lost event was an edit: the index
		// keeps the previous version.
		return []string{vocab.AuditMissingInBroker, series(vocab.ReconcileGaps, vocab.LabelKind, vocab.GapMissingTarget) + " (" + vocab.GapStaleTarget + " for an edit)",
			vocab.OutboxPublishedNoReceipt}
	case FaultConsumerStall:
		return []string{series(vocab.ConsumerLagSeconds, vocab.LabelGroup, "notify"), series(vocab.ConsumerLagMessages, vocab.LabelGroup, "notify")}
	case FaultIndexRowLost:
		return []string{series(vocab.ReconcileGaps, vocab.LabelKind, vocab.GapMissingTarget)}
	case FaultMissingOutbox:
		return []string{series(vocab.ReconcileGaps, vocab.LabelKind, vocab.GapMissingOutbox)}
	case FaultRollbackAfterPublish:
		return []string{series(vocab.ReconcileGaps, vocab.LabelKind, vocab.GapOrphanTarget)}
	case FaultOrderOvertaken:
		return []string{vocab.OutboxOutOfOrder, vocab.AuditOrderInversions, "/api/v1/stuck (out_of_order)"}
	case FaultMarkedByHand:
		return []string{vocab.OutboxPublishedNoReceipt}
	}
	return nil
}

// series writes the selector of metric's series with label equal to value.
func series(metric, label, value string) string {
	return metric + "{" + label + `="` + value + `"}`
}

// describe tells a newcomer in plain words what the fault did and what to
// look for.
func describe(r FaultRecord, o Options) string {
	var what string
	switch r.Kind {
	case FaultRelayCrash:
		what = fmt.Sprintf("A relay claimed event %s and crashed before publishing it (crash point C3). "+
			"The row stays CLAIMED; its %s lease expires, and %s later another relay takes it back and publishes it. "+
			"Meanwhile it ages past the %s outbox deadline.", ids(r), o.LeaseTTL, o.ReclaimAfter, o.OutboxDeadline)
	case FaultAckLost:
		what = fmt.Sprintf("The broker accepted event %s but its acknowledgement was lost (C5). "+
			"The relay records an unknown result and retries in %s, which puts the event on the topic a second time; "+
			"the indexer ignores the duplicate because it applies versions idempotently.", ids(r), o.UnknownBackoff)
	case FaultMarkBeforeSend:
		what = fmt.Sprintf("A relay marked event %s PUBLISHED before sending it, then crashed. "+
			"The row says published but the event never reached the topic: silent loss. "+
			"The audit finds it %s after it was marked, the reconcile job once the message is %s old.", ids(r), o.AuditGrace, o.ReconcileGrace)
	case FaultConsumerStall:
		what = fmt.Sprintf("The %s consumer group stopped consuming until %s (%s), longer than its %s lag deadline.",
			r.Group, r.Until.Format("15:04:05"), o.StallFor, o.NotifyDeadline)
	case FaultIndexRowLost:
		what = fmt.Sprintf("The search_index row of message %s was deleted although its event was published. "+
			"The next reconcile run (%s) reports it as missing_target.", msgIDs(r), o.ReconcileSchedule)
	case FaultMissingOutbox:
		what = fmt.Sprintf("Message %s was committed without its outbox row, so no event will ever be published for it. "+
			"The reconcile job reports it as missing_outbox once it is %s old.", msgIDs(r), o.ReconcileGrace)
	case FaultRollbackAfterPublish:
		what = fmt.Sprintf("Event %s was published from inside a transaction that then rolled back: message %s does not exist, "+
			"yet the indexer indexed it. The reconcile job reports it as orphan_target.", ids(r), msgIDs(r))
	case FaultOrderOvertaken, FaultMarkedByHand:
		what = describeOrder(r, o)
	default:
		what = string(r.Kind)
	}
	return fmt.Sprintf("[%s] FAULT %s: %s\n    Look for: %s\n", r.At.Format("15:04:05"), r.Kind, what, strings.Join(r.Kind.Metrics(), ", "))
}

func ids(r FaultRecord) string {
	if len(r.EventIDs) == 0 {
		return "(none)"
	}
	return strings.Join(r.EventIDs, ", ")
}

func msgIDs(r FaultRecord) string {
	s := make([]string, len(r.MessageIDs))
	for i, id := range r.MessageIDs {
		s[i] = strconv.FormatInt(id, 10)
	}
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, ", ")
}

// armedFault is a relay fault waiting for a relay to carry it out.
type armedFault struct {
	kind FaultKind
	done chan faultResult
}

// faultResult is what a relay reports after carrying out a fault.
type faultResult struct {
	rec FaultRecord
	err error
}

// InjectFault injects one fault now and returns its record once the fault
// has happened. Relay faults wait for a relay to claim a row, so the
// writers must be running; ctx bounds the wait. The fault is announced on
// Options.Out and listed by Faults.
func (p *Pipeline) InjectFault(ctx context.Context, kind FaultKind) (FaultRecord, error) {
	var (
		rec FaultRecord
		err error
	)
	switch kind {
	case FaultRelayCrash, FaultAckLost, FaultMarkBeforeSend, FaultOrderOvertaken, FaultMarkedByHand:
		rec, err = p.armRelayFault(ctx, kind)
	case FaultConsumerStall:
		until := time.Now().Add(p.opts.StallFor)
		p.mu.Lock()
		p.stallUntil = until
		p.mu.Unlock()
		rec = FaultRecord{Group: GroupNotify, Until: until}
	case FaultIndexRowLost:
		rec, err = p.loseIndexRow(ctx)
	case FaultMissingOutbox:
		rec, err = p.commitWithoutOutbox(ctx)
	case FaultRollbackAfterPublish:
		rec, err = p.publishThenRollback(ctx)
	default:
		return FaultRecord{}, fmt.Errorf("inject fault: unknown kind %q", kind)
	}
	if err != nil {
		return FaultRecord{}, fmt.Errorf("inject fault %s: %w", kind, err)
	}
	rec.Kind = kind
	if rec.At.IsZero() {
		rec.At = time.Now()
	}
	rec.Metrics = kind.Metrics()
	p.mu.Lock()
	p.faults = append(p.faults, rec)
	for _, id := range rec.MessageIDs {
		p.recent.freeze(id)
	}
	p.mu.Unlock()
	p.say(describe(rec, p.opts))
	return rec, nil
}

// Faults returns every fault injected so far, oldest first.
func (p *Pipeline) Faults() []FaultRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]FaultRecord(nil), p.faults...)
}

func (p *Pipeline) armRelayFault(ctx context.Context, kind FaultKind) (FaultRecord, error) {
	a := &armedFault{kind: kind, done: make(chan faultResult, 1)}
	p.mu.Lock()
	if p.armed != nil {
		p.mu.Unlock()
		return FaultRecord{}, errors.New("another relay fault is still waiting for a row")
	}
	p.armed = a
	p.mu.Unlock()
	select {
	case res := <-a.done:
		return res.rec, res.err
	case <-p.runCtx.Done():
		return FaultRecord{}, errors.New("the pipeline is closing")
	case <-ctx.Done():
		p.mu.Lock()
		if p.armed == a {
			p.armed = nil
		}
		p.mu.Unlock()
		// A relay may have taken it just now.
		select {
		case res := <-a.done:
			return res.rec, res.err
		default:
		}
		return FaultRecord{}, fmt.Errorf("no relay claimed a row in time: %w", ctx.Err())
	}
}

// takeRelayFault hands the armed relay fault, if any, to a relay.
func (p *Pipeline) takeRelayFault() *armedFault {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.armed
	p.armed = nil
	return a
}

// putBackRelayFault re-arms a fault the relay could not carry out (no row
// to claim).
func (p *Pipeline) putBackRelayFault(a *armedFault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.armed == nil {
		p.armed = a
	}
}

// stalled reports whether group must not consume now.
func (p *Pipeline) stalled(group string) bool {
	if group != GroupNotify {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Now().Before(p.stallUntil)
}

// loseIndexRow deletes the search_index row of a message whose latest
// version was published and indexed, older than the reconcile grace, and
// that writers will not edit again.
func (p *Pipeline) loseIndexRow(ctx context.Context) (FaultRecord, error) {
	p.mu.Lock()
	recent := append([]int64(nil), p.recent.ids...)
	p.mu.Unlock()
	var id int64
	err := p.pool.QueryRow(ctx, `
		DELETE FROM search_index WHERE message_id = (
			SELECT m.id FROM messages m
			JOIN search_index s ON s.message_id = m.id AND s.version = m.version
			JOIN outbox o ON o.message_id = m.id AND o.message_version = m.version AND o.status = 'PUBLISHED'
			WHERE m.created_at < now() - make_interval(secs => $1) AND m.id <> ALL($2)
			ORDER BY m.created_at DESC LIMIT 1)
		RETURNING message_id`, p.opts.ReconcileGrace.Seconds(), recent).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return FaultRecord{}, fmt.Errorf("no indexed message older than %s yet", p.opts.ReconcileGrace)
	}
	if err != nil {
		return FaultRecord{}, fmt.Errorf("delete a search_index row: %w", err)
	}
	return FaultRecord{MessageIDs: []int64{id}}, nil
}

// commitWithoutOutbox commits a message and forgets its outbox row.
func (p *Pipeline) commitWithoutOutbox(ctx context.Context) (FaultRecord, error) {
	var id int64
	if err := p.pool.QueryRow(ctx, `INSERT INTO messages (body) VALUES ($1) RETURNING id`, body()).Scan(&id); err != nil {
		return FaultRecord{}, fmt.Errorf("insert message: %w", err)
	}
	return FaultRecord{MessageIDs: []int64{id}}, nil
}

// publishThenRollback writes a message and its outbox row, publishes the
// event from inside the transaction, then rolls the transaction back.
func (p *Pipeline) publishThenRollback(ctx context.Context) (FaultRecord, error) {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return FaultRecord{}, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	r, err := insertMessage(ctx, tx, p.opts.Topic)
	if err != nil {
		return FaultRecord{}, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.writerKafka.ProduceSync(pctx, r.record()).FirstErr(); err != nil {
		return FaultRecord{}, fmt.Errorf("publish inside the transaction: %w", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		return FaultRecord{}, fmt.Errorf("roll back: %w", err)
	}
	return FaultRecord{EventIDs: []string{r.EventID}, MessageIDs: []int64{r.MessageID}}, nil
}

// record is the Kafka record of an outbox row: key the message id, value
// the event, header event_id.
func (r outboxRow) record() *kgo.Record {
	return &kgo.Record{
		Topic:   r.Topic,
		Key:     []byte(strconv.FormatInt(r.MessageID, 10)),
		Value:   event{EventID: r.EventID, Type: r.EventType, MessageID: r.MessageID, Version: r.Version}.encode(),
		Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(r.EventID)}},
	}
}
