package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// syncBuffer collects output written from several goroutines.
type syncBuffer = testutil.SyncBuffer

func uniqueDB() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "outbox_demo_t_" + hex.EncodeToString(b)
}

// testOptions are fast settings for tests on the real server.
func testOptions() Options {
	return Options{
		DatabaseURL:    pgtest.ServerURL(),
		Database:       uniqueDB(),
		DropOnClose:    true,
		Rate:           10,
		PollInterval:   100 * time.Millisecond,
		LeaseTTL:       2 * time.Second,
		ReclaimAfter:   3 * time.Second,
		UnknownBackoff: 3 * time.Second,
		StallFor:       5 * time.Second,
		OrderStallFor:  3 * time.Second,
		ReconcileGrace: time.Second,
	}
}

func start(t *testing.T, o Options) (*Pipeline, *syncBuffer) {
	t.Helper()
	out := &syncBuffer{}
	o.Out = out
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: testLogLevel()}))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p, err := Start(ctx, o, logger)
	if err != nil {
		t.Fatalf("start demo: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return p, out
}

// eventually polls cond every 100ms until it returns nil or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func queryInt(t *testing.T, p *Pipeline, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("query %q: %v", sql, err)
	}
	return n
}

// topicCounts reads the whole topic and counts each event_id header.
func topicCounts(t *testing.T, p *Pipeline) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for _, id := range topicEvents(t, p) {
		counts[id]++
	}
	return counts
}

// topicOrder returns the order in which the events ids (all of one
// message, so of one partition) first appear on the topic, as their
// indexes in ids: "1,0" when the second came first.
func topicOrder(t *testing.T, p *Pipeline, ids ...string) string {
	t.Helper()
	var order []string
	seen := map[string]bool{}
	for _, e := range topicEvents(t, p) {
		for i, id := range ids {
			if e == id && !seen[id] {
				seen[id] = true
				order = append(order, fmt.Sprint(i))
			}
		}
	}
	return strings.Join(order, ",")
}

// topicEvents reads the whole topic and returns each record's event_id
// header, each partition's in offset order.
func topicEvents(t *testing.T, p *Pipeline) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.Brokers()...), kgo.ConsumeTopics(p.opts.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatalf("reader client: %v", err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, p.opts.Topic)
	if err != nil {
		t.Fatalf("end offsets: %v", err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of partition %d: %v", o.Partition, o.Err)
		}
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	var events []string
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read topic: %v (partitions left %v)", err, left)
		}
		fs.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "event_id" {
					events = append(events, string(h.Value))
				}
			}
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
	return events
}

// groupLag returns the summed lag of a group on the topic.
func groupLag(p *Pipeline, group string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.Brokers()...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	lags, err := adm.Lag(ctx, group)
	if err != nil {
		return 0, err
	}
	l, ok := lags[group]
	if !ok {
		return 0, fmt.Errorf("group %s not described", group)
	}
	if l.Error() != nil {
		return 0, l.Error()
	}
	var total int64
	seen := false
	for _, ps := range l.Lag {
		for _, m := range ps {
			if m.Err != nil {
				return 0, m.Err
			}
			total += m.Lag
			seen = true
		}
	}
	if !seen {
		return 0, fmt.Errorf("group %s has no committed offsets yet", group)
	}
	return total, nil
}

// allPublished says how many outbox rows are not published, if any.
func allPublished(t *testing.T, p *Pipeline) error {
	if n := queryInt(t, p, `SELECT count(*) FROM outbox WHERE status <> 'PUBLISHED'`); n != 0 {
		return fmt.Errorf("%d rows unpublished", n)
	}
	return nil
}

// drain stops the writers and waits until every row is published and
// indexed and both groups have caught up.
func drain(t *testing.T, p *Pipeline) {
	t.Helper()
	p.writersPaused.Store(true)
	eventually(t, 30*time.Second, "all outbox rows published", func() error { return allPublished(t, p) })
	eventually(t, 30*time.Second, "search_index holds every message at its version", func() error {
		if n := queryInt(t, p, `SELECT count(*) FROM messages m FULL JOIN search_index s ON s.message_id = m.id
			WHERE s.version IS DISTINCT FROM m.version`); n != 0 {
			return fmt.Errorf("%d messages not indexed at their version", n)
		}
		return nil
	})
	for _, g := range []string{GroupSearchIndex, GroupNotify} {
		eventually(t, 30*time.Second, "group "+g+" caught up", func() error {
			lag, err := groupLag(p, g)
			if err == nil && lag != 0 {
				err = fmt.Errorf("lag %d", lag)
			}
			return err
		})
	}
}

func TestPipelineFlowsEndToEnd(t *testing.T) {
	before := runtime.NumGoroutine()
	o := testOptions()
	p, out := start(t, o)
	if !strings.HasPrefix(p.Brokers()[0], "127.0.0.1:") {
		t.Errorf("kfake brokers %v, want 127.0.0.1", p.Brokers())
	}
	_, kport, _ := strings.Cut(p.Brokers()[0], ":")
	kp, _ := strconv.Atoi(kport)
	assertLoopbackOnly(t, "in-process Kafka", kp)
	eventually(t, 30*time.Second, "100 events published", func() error {
		if n := queryInt(t, p, `SELECT count(*) FROM outbox WHERE status = 'PUBLISHED'`); n < 100 {
			return fmt.Errorf("%d published", n)
		}
		return nil
	})
	drain(t, p)

	// Every relay worked, edits made v2 events, each event reached the
	// topic exactly once, and the published_at came after created_at.
	if n := queryInt(t, p, `SELECT count(DISTINCT claimed_by) FROM outbox`); n != int64(p.opts.Relays) {
		t.Errorf("%d relays published, want %d", n, p.opts.Relays)
	}
	if n := queryInt(t, p, `SELECT count(*) FROM outbox WHERE event_type = 'message.edited' AND message_version >= 2`); n == 0 {
		t.Error("no edit (v2) events")
	}
	if n := queryInt(t, p, `SELECT count(*) FROM outbox WHERE published_at < created_at OR attempts <> 1 OR last_error IS NOT NULL`); n != 0 {
		t.Errorf("%d healthy rows with a bad published_at, attempts or last_error", n)
		logRows(t, p, `SELECT event_id, attempts, last_error, claimed_by, created_at, published_at FROM outbox
			WHERE published_at < created_at OR attempts <> 1 OR last_error IS NOT NULL`)
	}
	if n := queryInt(t, p, `SELECT count(*) FROM messages m WHERE NOT EXISTS (SELECT 1 FROM outbox o WHERE o.message_id = m.id AND o.message_version = m.version)`); n != 0 {
		t.Errorf("%d messages without an outbox row at their version", n)
	}
	counts := topicCounts(t, p)
	rows := queryInt(t, p, `SELECT count(*) FROM outbox`)
	if int64(len(counts)) != rows {
		t.Errorf("%d distinct event ids on the topic, %d outbox rows", len(counts), rows)
		var ids []string
		for id := range counts {
			ids = append(ids, id)
		}
		logRows(t, p, `SELECT event_id, status, attempts, last_error, claimed_by, created_at, published_at FROM outbox
			WHERE event_id <> ALL($1::text[])`, ids)
	}
	for id, n := range counts {
		if n != 1 {
			t.Errorf("event %s on the topic %d times", id, n)
		}
	}
	if len(p.Faults()) != 0 {
		t.Errorf("faults injected with FaultEvery 0: %+v", p.Faults())
	}
	if !strings.Contains(out.String(), "Demo pipeline running") {
		t.Errorf("no start announcement: %q", out.String())
	}

	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	assertGoroutinesBack(t, before)
	assertDatabaseGone(t, o.Database)
}

func assertGoroutinesBack(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:n])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func assertDatabaseGone(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.ServerURL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil || n != 0 {
		t.Errorf("database %s still exists after Close with DropOnClose (%d, %v)", name, n, err)
	}
}

type outboxState struct {
	Status    string
	Attempts  int
	Expired   bool
	LastError string
}

func rowState(t *testing.T, p *Pipeline, eventID string) outboxState {
	t.Helper()
	var s outboxState
	var le *string
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := p.pool.QueryRow(ctx, `SELECT status, attempts, coalesce(lease_until < now(), false), last_error FROM outbox WHERE event_id = $1`, eventID).
		Scan(&s.Status, &s.Attempts, &s.Expired, &le)
	if err != nil {
		t.Fatalf("outbox row %s: %v", eventID, err)
	}
	if le != nil {
		s.LastError = *le
	}
	return s
}

func inject(t *testing.T, p *Pipeline, kind FaultKind) FaultRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rec, err := p.InjectFault(ctx, kind)
	if err != nil {
		t.Fatalf("inject %s: %v", kind, err)
	}
	if rec.Kind != kind || rec.At.IsZero() || len(rec.Metrics) == 0 {
		t.Fatalf("fault record %+v", rec)
	}
	return rec
}

func TestFaultsLeaveTheirTrace(t *testing.T) {
	before := runtime.NumGoroutine()
	o := testOptions()
	o.Rate = 5
	p, out := start(t, o)
	eventually(t, 30*time.Second, "events flowing", func() error {
		if n := queryInt(t, p, `SELECT count(*) FROM search_index`); n < 10 {
			return fmt.Errorf("%d indexed", n)
		}
		return nil
	})

	var tr traces
	tr.crashID = traceRelayCrash(t, p)
	tr.ackID = traceAckLost(t, p)
	// Silent loss: PUBLISHED, never on the topic.
	lost := inject(t, p, FaultMarkBeforeSend)
	tr.lostID = lost.EventIDs[0]
	if s := rowState(t, p, tr.lostID); s.Status != StatusPublished {
		t.Fatalf("row marked before sending: %+v, want PUBLISHED", s)
	}
	traceConsumerStall(t, p)
	tr.idxMsg, tr.moMsg = traceReconcileGaps(t, p)
	tr.rbID = traceRollbackAfterPublish(t, p)
	traceOrderOvertaken(t, p)
	// Marked by hand: PUBLISHED with no receipt, on the topic once.
	hand := inject(t, p, FaultMarkedByHand)
	tr.handID = hand.EventIDs[0]
	if n := queryInt(t, p, `SELECT count(*) FROM outbox WHERE event_id = $1 AND status = 'PUBLISHED' AND receipt IS NULL`, tr.handID); n != 1 {
		t.Errorf("row marked by hand: %d PUBLISHED rows without receipt, want 1", n)
	}

	// Let everything else settle, then check the traces that must last.
	settle(t, p)
	checkLastingTraces(t, p, tr)
	var kinds []FaultKind
	for _, f := range p.Faults() {
		kinds = append(kinds, f.Kind)
	}
	if fmt.Sprint(kinds) != fmt.Sprint(FaultKinds) {
		t.Errorf("Faults() kinds %v, want %v", kinds, FaultKinds)
	}
	for _, k := range FaultKinds {
		if !strings.Contains(out.String(), "FAULT "+string(k)+":") {
			t.Errorf("fault %s not announced", k)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	assertGoroutinesBack(t, before)
}

// traces are the events and messages whose faults must leave a trace
// that lasts after the pipeline settles.
type traces struct {
	crashID, ackID, lostID, rbID, handID string
	idxMsg, moMsg                        int64
}

// eventuallyRow waits up to d for event id's row to satisfy ok.
func eventuallyRow(t *testing.T, p *Pipeline, d time.Duration, what, id string, ok func(outboxState) bool) {
	t.Helper()
	eventually(t, d, what, func() error {
		if s := rowState(t, p, id); !ok(s) {
			return fmt.Errorf("%+v", s)
		}
		return nil
	})
}

// traceRelayCrash (C3): the claimed row keeps its lease past expiry, then
// a relay takes it back and publishes it.
func traceRelayCrash(t *testing.T, p *Pipeline) string {
	t.Helper()
	crash := inject(t, p, FaultRelayCrash)
	crashID := crash.EventIDs[0]
	if s := rowState(t, p, crashID); s.Status != StatusClaimed || s.Attempts != 1 {
		t.Fatalf("crashed row: %+v, want CLAIMED after 1 attempt", s)
	}
	eventuallyRow(t, p, 10*time.Second, "crashed row's lease expired while CLAIMED", crashID, func(s outboxState) bool {
		return s.Status == StatusClaimed && s.Expired
	})
	eventuallyRow(t, p, 15*time.Second, "crashed row reclaimed and published", crashID, func(s outboxState) bool {
		return s.Status == StatusPublished && s.Attempts == 2
	})
	return crashID
}

// traceAckLost (C5): the broker holds the event, the row is PENDING with
// an unknown result, and the retry puts it on the topic twice.
func traceAckLost(t *testing.T, p *Pipeline) string {
	t.Helper()
	ack := inject(t, p, FaultAckLost)
	ackID := ack.EventIDs[0]
	if s := rowState(t, p, ackID); s.Status != StatusPending || !strings.HasPrefix(s.LastError, unknownResultPrefix) {
		t.Fatalf("row after a lost ack: %+v, want PENDING with an unknown result", s)
	}
	if n := topicCounts(t, p)[ackID]; n != 1 {
		t.Fatalf("event with a lost ack on the topic %d times before the retry, want 1", n)
	}
	eventuallyRow(t, p, 15*time.Second, "lost-ack row retried and published", ackID, func(s outboxState) bool {
		return s.Status == StatusPublished && s.Attempts == 2
	})
	return ackID
}

// traceConsumerStall: notify's lag grows while search-index keeps up.
func traceConsumerStall(t *testing.T, p *Pipeline) {
	t.Helper()
	stall := inject(t, p, FaultConsumerStall)
	if stall.Group != GroupNotify || !stall.Until.After(stall.At) {
		t.Fatalf("stall record %+v", stall)
	}
	eventually(t, 5*time.Second, "notify lag grows during the stall", func() error {
		lag, err := groupLag(p, GroupNotify)
		if err == nil && lag < 5 {
			err = fmt.Errorf("lag %d", lag)
		}
		return err
	})
	if !p.stalled(GroupNotify) {
		t.Fatal("stall ended before its lag was seen; raise StallFor")
	}
}

// traceReconcileGaps injects the two gaps reconcile finds: missing_target
// (a published, indexed message loses its index row) and missing_outbox
// (a message without any outbox row). It returns both messages.
func traceReconcileGaps(t *testing.T, p *Pipeline) (idxMsg, moMsg int64) {
	t.Helper()
	idx := inject(t, p, FaultIndexRowLost)
	idxMsg = idx.MessageIDs[0]
	if n := queryInt(t, p, `SELECT count(*) FROM search_index WHERE message_id = $1`, idxMsg); n != 0 {
		t.Fatalf("index row of message %d still there", idxMsg)
	}
	if n := queryInt(t, p, `SELECT count(*) FROM messages m JOIN outbox o ON o.message_id = m.id AND o.message_version = m.version
		WHERE m.id = $1 AND o.status = 'PUBLISHED'`, idxMsg); n != 1 {
		t.Fatalf("message %d of the lost index row: %d published outbox rows at its version, want 1", idxMsg, n)
	}
	mo := inject(t, p, FaultMissingOutbox)
	moMsg = mo.MessageIDs[0]
	if n := queryInt(t, p, `SELECT count(*) FROM messages WHERE id = $1`, moMsg); n != 1 {
		t.Fatalf("message %d without outbox not committed", moMsg)
	}
	return idxMsg, moMsg
}

// traceRollbackAfterPublish (orphan_target): the event of a rolled-back
// message gets indexed.
func traceRollbackAfterPublish(t *testing.T, p *Pipeline) string {
	t.Helper()
	rb := inject(t, p, FaultRollbackAfterPublish)
	rbMsg, rbID := rb.MessageIDs[0], rb.EventIDs[0]
	if n := queryInt(t, p, `SELECT count(*) FROM messages WHERE id = $1`, rbMsg); n != 0 {
		t.Fatalf("rolled-back message %d exists", rbMsg)
	}
	if n := queryInt(t, p, `SELECT count(*) FROM outbox WHERE event_id = $1`, rbID); n != 0 {
		t.Fatalf("rolled-back outbox row %s exists", rbID)
	}
	eventually(t, 15*time.Second, "rolled-back message indexed", func() error {
		if n := queryInt(t, p, `SELECT count(*) FROM search_index WHERE message_id = $1`, rbMsg); n != 1 {
			return errors.New("not indexed")
		}
		return nil
	})
	return rbID
}

// traceOrderOvertaken (E9/E10): the overtaken event is held while its
// successor is published; then it is published after it.
func traceOrderOvertaken(t *testing.T, p *Pipeline) {
	t.Helper()
	ov := inject(t, p, FaultOrderOvertaken)
	if len(ov.EventIDs) != 2 {
		t.Fatalf("order fault record %+v, want the overtaken event and its successor", ov)
	}
	if s, n := rowState(t, p, ov.EventIDs[0]), rowState(t, p, ov.EventIDs[1]); s.Status != StatusClaimed || n.Status != StatusPublished {
		t.Fatalf("overtaken row %+v, successor %+v: want CLAIMED and PUBLISHED", s, n)
	}
	eventuallyRow(t, p, 20*time.Second, "overtaken row published after its stall", ov.EventIDs[0], func(s outboxState) bool {
		return s.Status == StatusPublished
	})
	if order := topicOrder(t, p, ov.EventIDs...); order != "1,0" {
		t.Errorf("on the topic the order fault's events came %s, want the successor first (1,0)", order)
	}
}

// settle pauses the writers and waits until every row is published and
// the notify group has caught up.
func settle(t *testing.T, p *Pipeline) {
	t.Helper()
	p.writersPaused.Store(true)
	eventually(t, 30*time.Second, "pipeline settled", func() error {
		if err := allPublished(t, p); err != nil {
			return err
		}
		if p.stalled(GroupNotify) {
			return errors.New("notify still stalled")
		}
		lag, err := groupLag(p, GroupNotify)
		if err == nil && lag != 0 {
			err = fmt.Errorf("notify lag %d", lag)
		}
		return err
	})
}

// checkLastingTraces checks what each fault leaves once the pipeline has
// settled: on the topic, in the receipts, in the index and the outbox.
func checkLastingTraces(t *testing.T, p *Pipeline, tr traces) {
	t.Helper()
	counts := topicCounts(t, p)
	if counts[tr.ackID] != 2 {
		t.Errorf("event with a lost ack on the topic %d times, want 2 (a duplicate)", counts[tr.ackID])
	}
	if counts[tr.lostID] != 0 {
		t.Errorf("event marked before sending on the topic %d times, want 0", counts[tr.lostID])
	}
	if counts[tr.rbID] != 1 {
		t.Errorf("rolled-back event on the topic %d times, want 1", counts[tr.rbID])
	}
	if counts[tr.handID] != 1 {
		t.Errorf("event marked by hand on the topic %d times, want 1", counts[tr.handID])
	}
	// Every row the relays published themselves carries a receipt.
	if n := queryInt(t, p, `SELECT count(*) FROM outbox WHERE status = 'PUBLISHED' AND receipt IS NULL AND event_id <> ALL($1)`,
		[]string{tr.lostID, tr.handID}); n != 0 {
		t.Errorf("%d rows published by the relays without a receipt", n)
	}
	if counts[tr.crashID] != 1 {
		t.Errorf("crashed relay's event on the topic %d times, want 1", counts[tr.crashID])
	}
	if n := queryInt(t, p, `SELECT count(*) FROM search_index WHERE message_id = $1`, tr.idxMsg); n != 0 {
		t.Errorf("lost index row of message %d came back", tr.idxMsg)
	}
	if n := queryInt(t, p, `SELECT count(*) FROM outbox WHERE message_id = $1`, tr.moMsg); n != 0 {
		t.Errorf("message %d got an outbox row", tr.moMsg)
	}
}

func TestFaultScriptInjectsInTurn(t *testing.T) {
	o := testOptions()
	o.FaultEvery = 2 * time.Second
	p, out := start(t, o)
	eventually(t, 20*time.Second, "three scripted faults", func() error {
		if n := len(p.Faults()); n < 3 {
			return fmt.Errorf("%d faults", n)
		}
		return nil
	})
	for i, f := range p.Faults()[:3] {
		if f.Kind != FaultKinds[i] {
			t.Errorf("fault %d is %s, want %s", i, f.Kind, FaultKinds[i])
		}
	}
	if !strings.Contains(out.String(), "a fault every 2s") {
		t.Errorf("start announcement does not mention the fault script: %q", out.String())
	}
}

// testLogLevel is Warn, or Info with DEMO_TEST_LOG=info.
func testLogLevel() slog.Level {
	if os.Getenv("DEMO_TEST_LOG") == "info" {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// logRows logs the rows of a query, to explain a failure.
func logRows(t *testing.T, p *Pipeline, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := p.pool.Query(ctx, sql, args...)
	if err != nil {
		t.Logf("query %q: %v", sql, err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		v, err := rows.Values()
		t.Logf("row %v %v", v, err)
	}
}

// listenAddrs returns the local addresses a TCP port is listened on, from
// /proc/net/tcp and /proc/net/tcp6, in kernel hex form (0100007F is
// 127.0.0.1, 00000000 every interface).
func listenAddrs(t *testing.T, port int) []string {
	t.Helper()
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 4 || fs[3] != "0A" { // 0A: LISTEN
				continue
			}
			addr, hexPort, ok := strings.Cut(fs[1], ":")
			if ok && hexPort == fmt.Sprintf("%04X", port) {
				out = append(out, addr)
			}
		}
	}
	return out
}

func assertLoopbackOnly(t *testing.T, what string, port int) {
	t.Helper()
	addrs := listenAddrs(t, port)
	if len(addrs) == 0 {
		t.Errorf("%s: nothing listens on port %d", what, port)
	}
	for _, a := range addrs {
		if a != "0100007F" {
			t.Errorf("%s listens on %s:%d, want 127.0.0.1 only", what, a, port)
		}
	}
}

// TestRealBrokers gives the demo brokers of a cluster it did not start: it
// starts no Kafka of its own, creates the topic there and runs on it.
func TestRealBrokers(t *testing.T) {
	kc := kafkatest.New(t, 1)
	o := testOptions()
	o.KafkaBrokers = kc.Brokers()
	p, _ := start(t, o)
	if p.fake != nil {
		t.Fatal("the demo started its own Kafka although brokers were given")
	}
	eventually(t, 30*time.Second, "events indexed through the given brokers", func() error {
		if n := queryInt(t, p, `SELECT count(*) FROM search_index`); n < 10 {
			return fmt.Errorf("%d indexed", n)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(ctx, p.opts.Topic)
	if err != nil || !topics.Has(p.opts.Topic) || len(topics[p.opts.Topic].Partitions) != 3 {
		t.Errorf("topic %s on the given cluster: %v, %v", p.opts.Topic, topics, err)
	}
}

// TestStartFailsCleanly: a start that cannot finish leaves nothing
// running.
func TestStartFailsCleanly(t *testing.T) {
	before := runtime.NumGoroutine()
	port, err := pgcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.DatabaseURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := Start(ctx, o, discard()); err == nil || !strings.Contains(err.Error(), "database URL") {
		t.Errorf("start on a database URL nothing answers on: %v", err)
	}

	// Kafka brokers that do not answer: the start gives up when its
	// context ends, after the database was made.
	o = testOptions()
	o.KafkaBrokers = []string{fmt.Sprintf("127.0.0.1:%d", port)}
	kctx, kcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer kcancel()
	if _, err := Start(kctx, o, discard()); err == nil || !strings.Contains(err.Error(), "create topic") {
		t.Errorf("start with brokers nothing answers on: %v", err)
	}
	assertDatabaseGone(t, o.Database)
	assertGoroutinesBack(t, before)
}
