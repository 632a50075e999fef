package libraries

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/discover"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// watermillTopic is the topic the tests publish to: watermill-sql keeps
// it in watermill_orders and its groups' offsets in
// watermill_offsets_orders.
const watermillTopic = "orders"

// watermillSchema is the library's default PostgreSQL schema, handing
// out one message per transaction: a group's ack of a message is then
// committed before the next message reaches the handler.
func watermillSchema() wmsql.DefaultPostgreSQLSchema {
	return wmsql.DefaultPostgreSQLSchema{SubscribeBatchSize: 1}
}

// watermillPublish publishes n messages through watermill-sql, one to
// three per call (the messages of one call share a transaction).
func watermillPublish(t testing.TB, rg *rig, r *rand.Rand, n int) {
	t.Helper()
	pub, err := wmsql.NewPublisher(wmsql.BeginnerFromPgx(rg.db.Admin),
		wmsql.PublisherConfig{SchemaAdapter: watermillSchema(), AutoInitializeSchema: true}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for n > 0 {
		k := min(1+r.IntN(3), n)
		msgs := make([]*message.Message, k)
		for i := range msgs {
			msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(`{"order":1}`))
		}
		if err := pub.Publish(watermillTopic, msgs...); err != nil {
			t.Fatal(err)
		}
		n -= k
	}
}

// watermillConsume runs a subscriber in group that acks the first k
// messages it is handed and stops on the next one, unacked; k = n acks
// them all. It returns the UUIDs it acked.
func watermillConsume(t *testing.T, rg *rig, group string, k, n int) map[string]bool {
	t.Helper()
	sub, err := wmsql.NewSubscriber(wmsql.BeginnerFromPgx(rg.db.Admin), wmsql.SubscriberConfig{
		ConsumerGroup: group, SchemaAdapter: watermillSchema(), OffsetsAdapter: wmsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true, PollInterval: 10 * time.Millisecond,
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	msgs, err := sub.Subscribe(ctx, watermillTopic)
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	for len(acked) < k {
		select {
		case m := <-msgs:
			acked[m.UUID] = true
			m.Ack()
		case <-ctx.Done():
			t.Fatalf("group %s: %d of %d messages handed out by the deadline", group, len(acked), k)
		}
	}
	if k < n {
		// The next message arrives only once the k-th ack is committed.
		select {
		case <-msgs:
		case <-ctx.Done():
			t.Fatalf("group %s: message %d not handed out by the deadline", group, k+1)
		}
	} else {
		waitAcked(t, rg, group, ctx)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	return acked
}

// waitAcked waits until group's offset is the topic's last message.
func waitAcked(t *testing.T, rg *rig, group string, ctx context.Context) {
	t.Helper()
	for {
		var done bool
		err := rg.db.Admin.QueryRow(ctx, `SELECT (SELECT offset_acked FROM watermill_offsets_orders WHERE consumer_group = $1)
  = (SELECT max("offset") FROM watermill_orders)`, group).Scan(&done)
		if err != nil {
			t.Fatalf("group %s: %v", group, err)
		}
		if done {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("group %s: last ack not committed by the deadline", group)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestWatermillSQLAgainstTruth publishes and consumes through
// watermill-sql itself, with consumer groups stopped at different
// points, and compares every series of the watermill-sql preset with the
// truth: a group's pending messages are those its subscriber did not
// ack, as the test recorded them.
func TestWatermillSQLAgainstTruth(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 25))
			rg := newRigSQL(t, "")
			n := 12 + r.IntN(12)
			watermillPublish(t, rg, r, n)
			groups := map[string]int{"billing": r.IntN(n), "shipping": r.IntN(n), "audit": n}
			acked := map[string][]string{}
			for _, g := range []string{"billing", "shipping", "audit"} {
				acked[g] = []string{} // not NULL: <> ALL(NULL) holds for no row
				for u := range watermillConsume(t, rg, g, groups[g], n) {
					acked[g] = append(acked[g], u)
				}
			}
			// Spread the creation times over 20 minutes (the library
			// writes the publishing transaction's time) and put the
			// exporter's clock half a second after the newest.
			rg.db.Exec(t, `UPDATE watermill_orders SET created_at = created_at - make_interval(secs => ("offset" * 7919) % 1200)`)
			rg.db.Exec(t, `UPDATE fakeclock.clock SET t = (SELECT max(created_at) FROM watermill_orders)::timestamptz + interval '0.5 s'`)

			c := newCollector(rg, outboxFor(t, "watermill-sql", "    table: watermill_orders\n"))
			got := collect(t, c)
			want := watermillTruth(t, rg, acked)
			compareMetrics(t, got, want)
			watermillStuck(t, rg, want)
		})
	}
}

// watermillTruth is every series the exporter should show: per group
// with a message it did not ack, the count, the oldest age and those
// past the deadline of 5m, all computed over the messages whose UUIDs
// the group's subscriber did not ack.
func watermillTruth(t *testing.T, rg *rig, acked map[string][]string) metrics {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	want := metrics{key(vocab.OutboxEventsCapped, map[string]string{"outbox": "events"}): 0}
	for g, uuids := range acked {
		var n, past int64
		var age float64
		err := rg.db.Admin.QueryRow(ctx, `SELECT count(*), coalesce(extract(epoch FROM (SELECT t FROM fakeclock.clock) - min(created_at)::timestamptz)::float8, 0),
  count(*) FILTER (WHERE created_at::timestamptz < (SELECT t FROM fakeclock.clock) - interval '5 minutes')
FROM watermill_orders WHERE uuid <> ALL($1::text[])`, uuids).Scan(&n, &age, &past)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			// A group with nothing waiting has no series of its own.
			continue
		}
		l := map[string]string{"outbox": "events", "consumer_group": g}
		for _, st := range outbox.GaugeStates {
			ls := map[string]string{"outbox": "events", "consumer_group": g, "state": st.String()}
			want[key(vocab.OutboxEvents, ls)] = 0
		}
		want[key(vocab.OutboxEvents, map[string]string{"outbox": "events", "consumer_group": g, "state": "pending"})] = float64(n)
		want[key(vocab.OutboxOldestPendingAge, l)] = age
		want[key(vocab.OutboxDeadline, l)] = 300
		want[key(vocab.OutboxPastDeadline, l)] = float64(past)
		want[key(vocab.OutboxRetried, l)] = 0
		want[key(vocab.OutboxUnknownResult, l)] = 0
	}
	return want
}

// compareMetrics fails on any series missing, extra or off (ages to a
// millisecond).
func compareMetrics(t *testing.T, got, want metrics) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("missing %s (want %v)", k, w)
		} else if math.Abs(g-w) > 1e-3 {
			t.Errorf("%s = %v, want %v", k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected %s = %v", k, g)
		}
	}
}

// TestWatermillCheck: check reads the offsets table beside the messages
// table, names the preset and asks for no index on a column the messages
// table does not have; an offsets table of another shape fails
// naming the column it lacks.
func TestWatermillCheck(t *testing.T) {
	rg := newRigSQL(t, "")
	watermillPublish(t, rg, rand.New(rand.NewPCG(1, 25)), 3)
	watermillConsume(t, rg, "billing", 1, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o := outboxFor(t, "watermill-sql", "    table: watermill_orders\n")
	r, err := outbox.Check(ctx, rg.pool, "events", o)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK || !strings.Contains(r.Text(), "ok   preset watermill-sql: schema v4") || len(r.Statements) > 0 {
		t.Errorf("check:\n%s", r.Text())
	}
	rg.db.Exec(t, "ALTER TABLE watermill_offsets_orders RENAME offset_acked TO acked")
	r, err = outbox.Check(ctx, rg.pool, "events", o)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || !strings.Contains(r.Text(), "offsets_table watermill_offsets_orders lacks column offset_acked") {
		t.Errorf("check on an offsets table without offset_acked: OK %v\n%s", r.OK, r.Text())
	}
}

// TestWatermillDiscover: discover finds the topic the library created
// and writes the preset with its table; the config it prints loads.
func TestWatermillDiscover(t *testing.T) {
	rg := newRigSQL(t, "")
	watermillPublish(t, rg, rand.New(rand.NewPCG(1, 25)), 2)
	watermillConsume(t, rg, "billing", 1, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db, err := discover.Scan(ctx, "main", &config.Database{DSN: config.Secret(rg.db.URL), MaxConnections: 1,
		StatementTimeout: 10 * time.Second, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	out, err := discover.Render([]discover.Database{db}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(db.Found) != 1 || !strings.Contains(out, "preset: watermill-sql") || !strings.Contains(out, "table: public.watermill_orders") || strings.Contains(out, "CREATE INDEX") {
		t.Errorf("discover found %d tables:\n%s", len(db.Found), out)
	}
}

// watermillStuck: the stuck-rows page lists each group's pending
// messages once per group, as many as the truth counts.
func watermillStuck(t *testing.T, rg *rig, want metrics) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rows, err := outbox.Stuck(ctx, rg.pool, "events", outboxFor(t, "watermill-sql", "    table: watermill_orders\n"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]float64{}
	for _, r := range rows {
		if r.State != outbox.Pending {
			t.Errorf("stuck row %s of %v: state %v", r.ID, r.Labels, r.State)
		}
		per[r.Labels["consumer_group"]]++
	}
	for _, g := range []string{"billing", "shipping", "audit"} {
		w := want[key(vocab.OutboxEvents, map[string]string{"outbox": "events", "consumer_group": g, "state": "pending"})]
		if per[g] != w {
			t.Errorf("stuck rows of group %s: %v, want %v", g, per[g], w)
		}
	}
}
