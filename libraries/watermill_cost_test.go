package libraries

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// watermillHand is the watermill-sql preset written by hand.
const watermillHand = `    table: watermill_orders
    offsets_table: watermill_offsets_orders
    id: offset
    created_at: created_at
    labels: {consumer_group: consumer_group}
`

// watermillSpecs are the preset's and the hand-written config's specs on
// a topic the library created.
func watermillSpecs(t testing.TB, rg *rig) (preset, hand *outboxsql.Spec) {
	t.Helper()
	specs := [2]*outboxsql.Spec{}
	for i, o := range []*config.Outbox{outboxFor(t, "watermill-sql", "    table: watermill_orders\n"), outboxFor(t, "", watermillHand)} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cols, err := outboxsql.IntrospectOutbox(ctx, rg.pool, o)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if specs[i], err = outboxsql.NewSpec("events", o, cols); err != nil {
			t.Fatal(err)
		}
	}
	return specs[0], specs[1]
}

// TestWatermillPresetAddsNoQuery: the preset's queries are those of the
// same config written by hand, text for text.
func TestWatermillPresetAddsNoQuery(t *testing.T) {
	rg := newRigSQL(t, "")
	watermillPublish(t, rg, rand.New(rand.NewPCG(1, 25)), 2)
	watermillConsume(t, rg, "billing", 1, 2)
	p, h := watermillSpecs(t, rg)
	if a, b := planned(p), planned(h); !slices.Equal(a, b) {
		t.Errorf("the preset's queries differ from the hand-written config's:\n%s\nvs\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
}

// BenchmarkWatermillCollection: one collection of a topic of 5,000
// messages published through watermill-sql, with three consumer groups at
// seeded offsets, through the preset and through the same config written
// by hand, taken in turn in one loop; it reports their ratio (BENCHMARKS.md).
//
//	go test -run XXX -bench WatermillCollection -benchtime 100x -count 3 ./libraries/
func BenchmarkWatermillCollection(b *testing.B) {
	rg := newRigSQL(b, "")
	r := rand.New(rand.NewPCG(1, 25))
	watermillPublish(b, rg, r, 5000)
	// The library creates the offsets table; the groups' offsets are
	// written as its ack writes them, at fixed places (consuming 5,000
	// messages one transaction each would only slow the setup).
	sub, err := wmsql.NewSubscriber(wmsql.BeginnerFromPgx(rg.db.Admin), wmsql.SubscriberConfig{
		ConsumerGroup: "billing", SchemaAdapter: watermillSchema(), OffsetsAdapter: wmsql.DefaultPostgreSQLOffsetsAdapter{},
	}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	if err := sub.SubscribeInitialize(watermillTopic); err != nil {
		b.Fatal(err)
	}
	rg.db.Exec(b, `INSERT INTO watermill_offsets_orders (consumer_group, offset_acked, last_processed_transaction_id)
SELECT g, m."offset", m.transaction_id FROM (VALUES ('billing', 1000), ('shipping', 4000), ('audit', 4990)) v(g, k)
JOIN watermill_orders m ON m."offset" = v.k`)
	rg.db.Exec(b, "VACUUM ANALYZE")
	cs := [2]*outbox.Collector{newCollector(rg, outboxFor(b, "watermill-sql", "    table: watermill_orders\n")), newCollector(rg, outboxFor(b, "", watermillHand))}
	var spent [2]time.Duration
	for _, c := range cs {
		collect(b, c)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range cs {
			j := (i + k) % 2
			start := time.Now()
			collect(b, cs[j])
			spent[j] += time.Since(start)
		}
	}
	b.ReportMetric(float64(spent[0].Microseconds())/float64(b.N), "preset-us/op")
	b.ReportMetric(float64(spent[1].Microseconds())/float64(b.N), "hand-us/op")
	b.ReportMetric(float64(spent[0])/float64(spent[1]), "ratio")
}
