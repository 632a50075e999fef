package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// noCreatedSeeds are the seeded states TestNoCreatedAt compares with its
// truth.
var noCreatedSeeds = []uint64{1, 2, 3}

// ageSeries are the series that need a creation time.
var ageSeries = []string{vocab.OutboxOldestPendingAge, vocab.OutboxDeadline,
	vocab.OutboxPastDeadline, vocab.OutboxPublishedLate, vocab.OutboxPublishLatency}

// TestNoCreatedAt: a table with no creation time is counted by state and
// label exactly as a brute-force count over the generated rows says,
// with and without capping, while no series of an age is exported (not
// even 0); check passes once its indexes exist and says what cannot be
// seen; rows seen becoming published are counted without a latency.
func TestNoCreatedAt(t *testing.T) {
	for _, seed := range noCreatedSeeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 25))
			db, pool := setup(t, `CREATE TABLE msgs (id text PRIMARY KEY, topic text, state text NOT NULL, sent_at timestamptz)`)
			truth := map[string]float64{} // "state/topic" -> rows
			topics := []string{"a", "b", "c", ""}
			var vals []string
			for i := range 60 + rng.IntN(60) {
				topic, st := topics[rng.IntN(len(topics))], []string{"NEW", "NEW", "SENDING", "SENT", "FAILED"}[rng.IntN(5)]
				tv := "NULL"
				if topic != "" {
					tv = "'" + topic + "'"
				}
				sent := "NULL"
				if st == "SENT" {
					sent = "now() - interval '1 hour'"
				}
				vals = append(vals, fmt.Sprintf("('m%03d', %s, '%s', %s)", i, tv, st, sent))
				state := map[string]string{"NEW": "pending", "SENDING": "in_flight", "FAILED": "dead"}[st]
				if state != "" {
					truth[state+"/"+topic]++
				}
			}
			db.Exec(t, "INSERT INTO msgs VALUES "+strings.Join(vals, ", "))
			o := &config.Outbox{Table: "msgs", ID: "id", Labels: []config.Label{{Name: "topic", Column: "topic"}},
				Status: "state", Pending: []string{"NEW"}, InFlight: []string{"SENDING"}, Published: []string{"SENT"},
				Dead: []string{"FAILED"}, PublishedAt: "sent_at", MaxLabelValues: 10, MaxCount: 1000}

			r := check(t, pool, "msgs", o)
			for _, stmt := range r.Statements {
				db.Exec(t, stmt)
			}
			if r = check(t, pool, "msgs", o); !r.OK || !strings.Contains(r.Text(), "no creation time") {
				t.Fatalf("check with its indexes: OK=%v, or no word on the missing creation time:\n%s", r.OK, r.Text())
			}

			c := NewCollector("msgs", o, pool, slog.New(slog.DiscardHandler))
			m := collect(t, c)
			for _, st := range []string{"pending", "in_flight", "dead"} {
				for _, topic := range topics {
					key := fmt.Sprintf(`outbox_events{outbox="msgs",state=%q,topic=%q}`, st, topic)
					if got, want := m[key], truth[st+"/"+topic]; got != want {
						t.Errorf("%s = %v, truth %v", key, got, want)
					}
				}
			}
			noAge(t, m)
			stuckAgeUnknown(t, pool, o, truth["pending/"]+truth["pending/a"]+truth["pending/b"]+truth["pending/c"]+truth["in_flight/"]+truth["in_flight/a"]+truth["in_flight/b"]+truth["in_flight/c"])

			// Rows published from now on are counted, with no latency.
			db.Exec(t, "UPDATE msgs SET state = 'SENT', sent_at = now() WHERE state = 'NEW' AND topic = 'a'")
			m = collect(t, c)
			if got, want := m[`outbox_published_events_total{outbox="msgs",topic="a"}`], truth["pending/a"]; got != want {
				t.Errorf("published a = %v, truth %v", got, want)
			}
			noAge(t, m)

			// Capped: the pending rows are read per label combination in
			// id order; still no age.
			o.MaxCount = 2
			m = collect(t, NewCollector("msgs", o, pool, slog.New(slog.DiscardHandler)))
			if m[`outbox_events_capped{outbox="msgs"}`] != 1 {
				t.Errorf("not capped: %v", m)
			}
			noAge(t, m)
		})
	}
}

func noAge(t *testing.T, m sampleMetrics) {
	t.Helper()
	for k := range m {
		for _, a := range ageSeries {
			if strings.HasPrefix(k, a) {
				t.Errorf("%s exported for a table with no creation time", k)
			}
		}
	}
}

// stuckAgeUnknown: the stuck rows of a table with no creation time are
// every unpublished row (the limit is above their number), each marked
// as of unknown age and none past a deadline.
func stuckAgeUnknown(t *testing.T, pool *pgxpool.Pool, o *config.Outbox, unpublished float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := Stuck(ctx, pool, "msgs", o, MaxStuckRows)
	if err != nil {
		t.Fatal(err)
	}
	if float64(len(rows)) != unpublished {
		t.Errorf("%d stuck rows, truth %v unpublished", len(rows), unpublished)
	}
	for _, r := range rows {
		if !r.AgeUnknown || r.PastDeadline {
			t.Errorf("stuck row %+v: want its age unknown and not past a deadline", r)
		}
	}
}
