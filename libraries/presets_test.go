package libraries

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
)

// library is one preset proven on its library's table.
type library struct {
	preset, fixture string
	// label is the preset's label name, "" without one; label2 its
	// second, whose value truth writes after the first's and a "|".
	label, label2 string
	// seed writes n rows as the library would, at times before now.
	seed func(r *rand.Rand, n int, now time.Time) string
	// truth is, per row, its label value, its state as the library means
	// it (pending, in_flight, dead or published), its creation time and
	// whether it was retried: read straight from the library's columns.
	truth string
	// publish marks up to k unpublished rows delivered at now.
	publish func(k int, now time.Time) string
	// published says whether the library keeps delivered rows with a
	// time (publish counters and latency) or deletes them.
	published bool
	// noAge: the library keeps no creation time (truth's time is NULL),
	// so no series of an age may appear, not even 0.
	noAge bool
}

var libraries = []library{
	{
		preset: "spring-modulith", fixture: "spring-modulith-1.sql", label: "listener",
		seed: func(r *rand.Rand, n int, now time.Time) string {
			var b strings.Builder
			for i := 0; i < n; i++ {
				at := now.Add(-time.Duration(r.IntN(1200)) * time.Second)
				done := "NULL"
				if r.IntN(2) == 0 {
					done = ts(before(r, at, now))
				}
				fmt.Fprintf(&b, "INSERT INTO event_publication (id, listener_id, event_type, serialized_event, publication_date, completion_date) VALUES (gen_random_uuid(), 'app.Listener.on%d', 'app.OrderPlaced', '{}', %s, %s);\n",
					r.IntN(3), ts(at), done)
			}
			return b.String()
		},
		truth: `SELECT listener_id, CASE WHEN completion_date IS NULL THEN 'pending' ELSE 'published' END, publication_date, false FROM event_publication`,
		publish: func(k int, now time.Time) string {
			return fmt.Sprintf("UPDATE event_publication SET completion_date = %s WHERE id IN (SELECT id FROM event_publication WHERE completion_date IS NULL ORDER BY id LIMIT %d)", ts(now), k)
		},
		published: true,
	},
	{
		// The 2.x schema, with rows an upgraded 1.x application left: no
		// status and no attempts, not completed.
		preset: "spring-modulith", fixture: "spring-modulith-2.sql", label: "listener",
		seed: func(r *rand.Rand, n int, now time.Time) string {
			var b strings.Builder
			for i := 0; i < n; i++ {
				at := now.Add(-time.Duration(r.IntN(1200)) * time.Second)
				status, done, attempts := "NULL", "NULL", "NULL"
				switch r.IntN(6) {
				case 0:
					status, attempts = "'PUBLISHED'", "1" // written 1 on insert
				case 1:
					status, attempts = "'PROCESSING'", "1"
				case 2:
					status, attempts, done = "'COMPLETED'", "1", ts(before(r, at, now))
				case 3:
					status, attempts = "'FAILED'", fmt.Sprint(1+r.IntN(3))
				case 4:
					status, attempts = "'RESUBMITTED'", fmt.Sprint(2+r.IntN(3))
				}
				fmt.Fprintf(&b, "INSERT INTO event_publication (id, listener_id, event_type, serialized_event, publication_date, completion_date, status, completion_attempts) VALUES (gen_random_uuid(), 'app.Listener.on%d', 'app.OrderPlaced', '{}', %s, %s, %s, %s);\n",
					r.IntN(3), ts(at), done, status, attempts)
			}
			return b.String()
		},
		truth: `SELECT listener_id, CASE WHEN status IS NULL OR status IN ('PUBLISHED', 'RESUBMITTED') THEN 'pending' WHEN status = 'PROCESSING' THEN 'in_flight'
  WHEN status = 'COMPLETED' THEN 'published' WHEN status = 'FAILED' THEN 'dead' END, publication_date, coalesce(completion_attempts > 1, false) FROM event_publication`,
		publish: func(k int, now time.Time) string {
			return fmt.Sprintf("UPDATE event_publication SET status = 'COMPLETED', completion_date = %s WHERE id IN (SELECT id FROM event_publication WHERE status IS NULL OR status IN ('PUBLISHED', 'RESUBMITTED') ORDER BY id LIMIT %d)", ts(now), k)
		},
		published: true,
	},
	{
		preset: "namastack", fixture: "namastack.sql", label: "handler",
		seed: func(r *rand.Rand, n int, now time.Time) string {
			var b strings.Builder
			for i := 0; i < n; i++ {
				at := now.Add(-time.Duration(r.IntN(1200)) * time.Second)
				status, done, failures, reason := "NEW", "NULL", 0, "NULL"
				switch r.IntN(4) {
				case 0:
					status, done = "COMPLETED", ts(before(r, at, now))
				case 1:
					status, failures, reason = "FAILED", 1+r.IntN(5), "'timeout'"
				case 2:
					failures, reason = 1+r.IntN(3), "'broker down'" // retrying
				}
				fmt.Fprintf(&b, "INSERT INTO outbox_record (id, status, record_key, record_type, payload, created_at, completed_at, failure_count, failure_reason, next_retry_at, partition_no, handler_id) VALUES ('r%d', '%s', 'order-%d', 'OrderPlaced', '{}', %s, %s, %d, %s, %s, %d, 'app.Handler%d');\n",
					i, status, r.IntN(10), ts(at), done, failures, reason, ts(at), r.IntN(256), r.IntN(3))
			}
			return b.String()
		},
		truth: `SELECT handler_id, CASE status WHEN 'NEW' THEN 'pending' WHEN 'COMPLETED' THEN 'published' WHEN 'FAILED' THEN 'dead' END, created_at, status = 'NEW' AND failure_count > 0 FROM outbox_record`,
		publish: func(k int, now time.Time) string {
			return fmt.Sprintf("UPDATE outbox_record SET status = 'COMPLETED', completed_at = %s WHERE id IN (SELECT id FROM outbox_record WHERE status = 'NEW' ORDER BY id LIMIT %d)", ts(now), k)
		},
		published: true,
	},
	{
		preset: "eventuate-tram", fixture: "eventuate-tram.sql", label: "destination",
		seed: func(r *rand.Rand, n int, now time.Time) string {
			var b strings.Builder
			for i := 0; i < n; i++ {
				at := now.Add(-time.Duration(r.IntN(1200000)) * time.Millisecond)
				fmt.Fprintf(&b, "INSERT INTO message (id, destination, headers, payload, published, creation_time) VALUES ('m%d', 'orders%d', '{}', '{}', %d, %d);\n",
					i, r.IntN(3), r.IntN(2), at.UnixMilli())
			}
			return b.String()
		},
		// creation_time is milliseconds since the epoch; published 0 or 1.
		truth: `SELECT destination, CASE published WHEN 0 THEN 'pending' WHEN 1 THEN 'published' END, 'epoch'::timestamptz + creation_time * interval '1 millisecond', false FROM message`,
		publish: func(k int, now time.Time) string {
			return fmt.Sprintf("UPDATE message SET published = 1 WHERE id IN (SELECT id FROM message WHERE published = 0 ORDER BY id LIMIT %d)", k)
		},
	},
	{
		preset: "masstransit", fixture: "masstransit.sql",
		seed: func(r *rand.Rand, n int, now time.Time) string {
			var b strings.Builder
			for i := 0; i < n; i++ {
				at := now.Add(-time.Duration(r.IntN(1200)) * time.Second)
				fmt.Fprintf(&b, `INSERT INTO "OutboxMessage" ("SentTime", "MessageId", "ContentType", "Body", "DestinationAddress") VALUES (%s, gen_random_uuid(), 'application/vnd.masstransit+json', '{}', 'rabbitmq://localhost/order-placed');`+"\n", ts(at))
			}
			return b.String()
		},
		// Delivered messages are deleted: every row present waits.
		truth: `SELECT '', 'pending', "SentTime", false FROM "OutboxMessage"`,
		publish: func(k int, now time.Time) string {
			return fmt.Sprintf(`DELETE FROM "OutboxMessage" WHERE "SequenceNumber" IN (SELECT "SequenceNumber" FROM "OutboxMessage" ORDER BY 1 LIMIT %d)`, k)
		},
	},
	{
		preset: "nservicebus", fixture: "nservicebus.sql",
		seed: func(r *rand.Rand, n int, now time.Time) string {
			var b strings.Builder
			for i := 0; i < n; i++ {
				// The persister stores the outgoing operations undispatched,
				// then marks them dispatched at UTC now and empties them.
				dispatched, at, ops := "false", "NULL", `[{"MessageId":"x"}]`
				if r.IntN(2) == 0 {
					dispatched, at, ops = "true", utcTS(now.Add(-time.Duration(r.IntN(1200))*time.Second)), "[]"
				}
				fmt.Fprintf(&b, `INSERT INTO "OutboxData" ("MessageId", "Dispatched", "DispatchedAt", "PersistenceVersion", "Operations") VALUES ('%08x-msg-%d', %s, %s, '8.1.0', '%s');`+"\n",
					r.Uint32(), i, dispatched, at, ops)
			}
			return b.String()
		},
		truth: `SELECT '', CASE WHEN "Dispatched" THEN 'published' ELSE 'pending' END, NULL::timestamptz, false FROM "OutboxData"`,
		publish: func(k int, now time.Time) string {
			return fmt.Sprintf(`UPDATE "OutboxData" SET "Dispatched" = true, "DispatchedAt" = %s, "Operations" = '[]' WHERE "MessageId" IN (SELECT "MessageId" FROM "OutboxData" WHERE NOT "Dispatched" ORDER BY 1 LIMIT %d)`, utcTS(now), k)
		},
		published: true, noAge: true,
	},
	{
		// Without a time column and the cdc link, the rows present are
		// what waits: the application deletes each one once written, the
		// router reading it from the log.
		preset: "debezium-outbox", fixture: "debezium-outbox.sql", label: "aggregatetype", label2: "type",
		seed: func(r *rand.Rand, n int, now time.Time) string {
			var b strings.Builder
			for i := 0; i < n; i++ {
				fmt.Fprintf(&b, "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (gen_random_uuid(), '%s', 'a%d', '%s', '{}');\n",
					[]string{"order", "payment", "customer"}[r.IntN(3)], r.IntN(20), []string{"Created", "Updated"}[r.IntN(2)])
			}
			return b.String()
		},
		truth: `SELECT aggregatetype || '|' || type, 'pending', NULL::timestamptz, false FROM outbox`,
		publish: func(k int, now time.Time) string {
			return fmt.Sprintf(`DELETE FROM outbox WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT %d)`, k)
		},
		noAge: true,
	},
}

// utcTS is t as a timestamp without time zone written in UTC, as .NET's
// DateTime.UtcNow reaches such a column.
func utcTS(t time.Time) string {
	return "'" + t.UTC().Format("2006-01-02 15:04:05.999999") + "'::timestamp"
}

// before is a time from at up to a minute later, never after now: a
// library stamps a delivery with its own clock, never ahead.
func before(r *rand.Rand, at, now time.Time) time.Time {
	d := at.Add(time.Duration(r.IntN(60)) * time.Second)
	if d.After(now) {
		return now
	}
	return d
}

func ts(t time.Time) string { return "'" + t.UTC().Format(time.RFC3339Nano) + "'::timestamptz" }

// presetSeeds: how many seeded states each preset is proven on.
const presetSeeds = 12

// TestPresetsAgainstTruth: for each preset, seeded states of its
// library's own table, read with only `preset: NAME`, give every signal
// the truth computed from the library's meaning of its columns; then k
// rows are delivered and the publish counter and latency count them.
func TestPresetsAgainstTruth(t *testing.T) {
	for _, lib := range libraries {
		t.Run(lib.preset+"/"+strings.TrimSuffix(lib.fixture, ".sql"), func(t *testing.T) {
			rg := newRig(t, lib.fixture)
			for seed := uint64(1); seed <= presetSeeds; seed++ {
				rg.db.Exec(t, "DROP SCHEMA public CASCADE; CREATE SCHEMA public")
				rg.db.Exec(t, ddl(t, lib.fixture))
				runSeed(t, rg, lib, seed)
			}
		})
	}
}

func runSeed(t *testing.T, rg *rig, lib library, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 25))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	rg.setClock(t, now)
	rg.db.Exec(t, lib.seed(r, 1+r.IntN(40), now))
	c := newCollector(rg, outboxFor(t, lib.preset, ""))
	got := collect(t, c)
	before := truth(t, rg, lib, now)
	compare(t, lib, seed, now, got, before)

	k := r.IntN(5)
	rg.db.Exec(t, lib.publish(k, now.Add(time.Second)))
	now = now.Add(10 * time.Second)
	rg.setClock(t, now)
	after := collect(t, c)
	later := truth(t, rg, lib, now)
	compare(t, lib, seed, now, after, later)
	// k asked for; as many were delivered as were waiting.
	k = int(count(before, "pending") - count(later, "pending"))
	if lib.published {
		var n float64
		for key, v := range after {
			if strings.HasPrefix(key, "outbox_published_events_total{") {
				n += v - got[key]
			}
		}
		lat := after[`outbox_publish_latency_seconds_count{outbox="events"}`] - got[`outbox_publish_latency_seconds_count{outbox="events"}`]
		if lib.noAge {
			lat = float64(k) // absent, as compare checks
		}
		if int(n) != k || lat != float64(k) {
			t.Errorf("seed %d: %d rows delivered, published_events_total rose by %v, latency count by %v", seed, k, n,
				after[`outbox_publish_latency_seconds_count{outbox="events"}`]-got[`outbox_publish_latency_seconds_count{outbox="events"}`])
		}
	}
}

// count is the rows of state st under every label value.
func count(tl map[string]*tally, st string) float64 {
	var n float64
	for _, x := range tl {
		n += x.states[st]
	}
	return n
}

// tally is the truth of one label value.
type tally struct {
	states  map[string]float64
	oldest  time.Time
	retried float64
}

func truth(t *testing.T, rg *rig, lib library, now time.Time) map[string]*tally {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := rg.db.Admin.Query(ctx, lib.truth)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]*tally{}
	for rows.Next() {
		var v, state string
		var at *time.Time
		var retried bool
		if err := rows.Scan(&v, &state, &at, &retried); err != nil {
			t.Fatal(err)
		}
		tl := out[v]
		if tl == nil {
			tl = &tally{states: map[string]float64{}}
			out[v] = tl
		}
		tl.states[state]++
		if state == "pending" || state == "in_flight" {
			if at != nil && (tl.oldest.IsZero() || at.Before(tl.oldest)) {
				tl.oldest = *at
			}
			if retried {
				tl.retried++
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func compare(t *testing.T, lib library, seed uint64, now time.Time, got metrics, want map[string]*tally) {
	t.Helper()
	labels := func(v string, extra ...string) map[string]string {
		m := map[string]string{"outbox": "events"}
		if lib.label2 != "" {
			v1, v2, _ := strings.Cut(v, "|")
			m[lib.label], m[lib.label2] = v1, v2
		} else if lib.label != "" {
			m[lib.label] = v
		}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	expected := map[string]bool{}
	for v, tl := range want {
		for _, st := range outbox.GaugeStates {
			k := key("outbox_events", labels(v, "state", st.String()))
			expected[k] = true
			if got[k] != tl.states[st.String()] {
				t.Errorf("seed %d: %s = %v, truth %v", seed, k, got[k], tl.states[st.String()])
			}
		}
		k := key("outbox_oldest_pending_age_seconds", labels(v))
		if !tl.oldest.IsZero() && got[k] != now.Sub(tl.oldest).Seconds() {
			t.Errorf("seed %d: %s = %v, truth %v", seed, k, got[k], now.Sub(tl.oldest).Seconds())
		}
		k = key("outbox_retried_events", labels(v))
		if _, ok := got[k]; (ok || tl.retried > 0) && got[k] != tl.retried {
			t.Errorf("seed %d: %s = %v, truth %v", seed, k, got[k], tl.retried)
		}
		k = key("outbox_unclassified_events", labels(v))
		if got[k] != 0 {
			t.Errorf("seed %d: %s = %v, truth 0: every row of the library has a state", seed, k, got[k])
		}
	}
	for k, v := range got {
		if lib.noAge && ageSeries(k) {
			t.Errorf("seed %d: %s = %v exported, but the table keeps no creation time", seed, k, v)
		}
		if strings.HasPrefix(k, "outbox_events{") && v != 0 && !expected[k] {
			t.Errorf("seed %d: %s = %v where the truth has no row", seed, k, v)
		}
	}
}

// ageSeries reports a series that needs a creation time.
func ageSeries(key string) bool {
	for _, n := range []string{"outbox_oldest_pending_age_seconds", "outbox_deadline_seconds", "outbox_past_deadline_events",
		"outbox_published_late_events_total", "outbox_publish_latency_seconds"} {
		if strings.HasPrefix(key, n+"{") || strings.HasPrefix(key, n+"_") {
			return true
		}
	}
	return false
}
