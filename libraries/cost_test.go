package libraries

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// handWritten are the keys a user would write for each library's table
// without a preset: the presets' cost is measured against them.
var handWritten = map[string]string{
	"spring-modulith-1.sql": `    table: event_publication
    id: id
    created_at: publication_date
    labels: {listener: listener_id}
    published_at: completion_date
`,
	"spring-modulith-2.sql": `    table: event_publication
    id: id
    created_at: publication_date
    labels: {listener: listener_id}
    status: status
    pending: [PUBLISHED, RESUBMITTED]
    in_flight: [PROCESSING]
    published: [COMPLETED]
    dead: [FAILED]
    published_at: completion_date
    attempts: completion_attempts
    attempts_on_insert: 1
    null_status: pending
`,
	"namastack.sql": `    table: outbox_record
    id: id
    created_at: created_at
    labels: {handler: handler_id}
    status: status
    pending: [NEW]
    published: [COMPLETED]
    dead: [FAILED]
    published_at: completed_at
    attempts: failure_count
    last_error: failure_reason
`,
	"eventuate-tram.sql": `    table: message
    id: id
    created_at: creation_time
    epoch_unit: ms
    labels: {destination: destination}
    status: published
    pending: ["0"]
    published: ["1"]
`,
	"masstransit.sql": `    table: OutboxMessage
    id: SequenceNumber
    created_at: SentTime
    time_zone: UTC
`,
	"debezium-outbox.sql": `    table: outbox
    id: id
    created_at: ""
    labels: {aggregatetype: aggregatetype, type: type}
`,
	"nservicebus.sql": `    table: OutboxData
    id: MessageId
    created_at: ""
    status: Dispatched
    pending: [false]
    published: [true]
    published_at: DispatchedAt
    time_zone: UTC
`,
}

// handOutbox parses the hand-written outbox of a fixture.
func handOutbox(t testing.TB, fixture string) *config.Outbox {
	t.Helper()
	y := "databases:\n  main:\n    dsn: postgres://x@127.0.0.1/app\noutboxes:\n  events:\n    database: main\n    deadline: 5m\n" + handWritten[fixture]
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Outboxes["events"]
}

// TestPresetAddsNoQuery: on each library's table, the queries a preset
// runs are those of the same config written by hand, text for text, and
// so are the indexes check asks for.
func TestPresetAddsNoQuery(t *testing.T) {
	for _, lib := range libraries {
		rg := newRig(t, lib.fixture)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cols, err := outboxsql.Introspect(ctx, rg.pool, lib.preset2table())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		specs := [2]*outboxsql.Spec{}
		for i, o := range []*config.Outbox{outboxFor(t, lib.preset, ""), handOutbox(t, lib.fixture)} {
			if specs[i], err = outboxsql.NewSpec("events", o, cols); err != nil {
				t.Fatal(err)
			}
		}
		if a, b := planned(specs[0]), planned(specs[1]); !slices.Equal(a, b) {
			t.Errorf("%s: the preset's queries differ from the hand-written config's:\n%s\nvs\n%s", lib.fixture, strings.Join(a, "\n"), strings.Join(b, "\n"))
		}
		if a, b := fmt.Sprint(specs[0].Indexes()), fmt.Sprint(specs[1].Indexes()); a != b {
			t.Errorf("%s: indexes differ:\n%s\nvs\n%s", lib.fixture, a, b)
		}
	}
}

func planned(s *outboxsql.Spec) []string {
	var out []string
	for _, p := range s.Planned() {
		out = append(out, p.Name+": "+p.SQL)
	}
	return out
}

// preset2table is the outbox table the fixture creates: the preset's.
func (l library) preset2table() string {
	p, _ := config.LookupPreset(l.preset)
	return p.Base().Fill.Table
}

// BenchmarkPresetCollection: one collection of each library's table read
// through its preset and through the same config written by hand, on the
// same 5,000 seeded rows with the indexes check asks for, the two taken in
// turn in one loop so that both see the same load. It reports each one's
// mean and their ratio, which BENCHMARKS.md gives (target at most 1.05x).
//
//	go test -run XXX -bench PresetCollection -benchtime 100x -count 3 ./libraries/
func BenchmarkPresetCollection(b *testing.B) {
	for _, lib := range libraries {
		rg := newRig(b, lib.fixture)
		now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		rg.setClock(b, now)
		rg.db.Exec(b, lib.seed(rand.New(rand.NewPCG(1, 25)), 5000, now))
		preset := outboxFor(b, lib.preset, "")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cols, err := outboxsql.Introspect(ctx, rg.pool, lib.preset2table())
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		spec, err := outboxsql.NewSpec("events", preset, cols)
		if err != nil {
			b.Fatal(err)
		}
		for _, ix := range spec.Indexes() {
			rg.db.Exec(b, ix.SQL(spec.O.Table))
		}
		rg.db.Exec(b, "VACUUM ANALYZE")
		b.Run(strings.TrimSuffix(lib.fixture, ".sql"), func(b *testing.B) {
			cs := [2]*outbox.Collector{newCollector(rg, preset), newCollector(rg, handOutbox(b, lib.fixture))}
			var spent [2]time.Duration
			for _, c := range cs {
				collect(b, c)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for k := range cs {
					j := (i + k) % 2 // alternate which goes first
					start := time.Now()
					collect(b, cs[j])
					spent[j] += time.Since(start)
				}
			}
			b.ReportMetric(float64(spent[0].Microseconds())/float64(b.N), "preset-us/op")
			b.ReportMetric(float64(spent[1].Microseconds())/float64(b.N), "hand-us/op")
			b.ReportMetric(float64(spent[0])/float64(spent[1]), "ratio")
		})
	}
}
