package audit

import (
	"bytes"
	"context"
	"crypto/md5" //nolint:gosec // the oracle's own sampling, as the README states it
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// The audit oracle: every generated history (oracle_history_test.go)
// is run through real auditors, and every audit series and finding is
// compared, at every comparison, with a brute-force computation over a
// full read of the topics and the whole table, by the rules as the README
// states them. It uses none of the auditor's code but the published
// constants (bucket count, thresholds of the mismatch rule).
//
//	go test -run Oracle ./collectors/audit/                  # CI seeds
//	go test -run Oracle ./collectors/audit/ -seeds 5000      # a long run
//	go test -run Oracle ./collectors/audit/ -seed 1234 -v    # one seed
var (
	oracleSeeds      = flag.Int("seeds", 40, "audit oracle: how many seeds to run against kfake")
	oracleKafkaSeeds = flag.Int("kafka-seeds", 3, "audit oracle: how many of them also run against the real Kafka broker")
	oracleSeedFrom   = flag.Int64("seed-from", 1, "audit oracle: the first seed")
	oracleOnly       = flag.Int64("seed", 0, "audit oracle: run only this seed")
)

// oracleRegressions are seeds that once found a fault; they always run.
//
// 20040, 20226, 20556, 20640, 22962: compacted topics, id in the key, a
// restart after compaction moved the log start with a gap before the
// window's first offset: the audit took the window as complete and
// reported rows whose records were deleted as lost.
var oracleRegressions = []int64{20040, 20226, 20556, 20640, 22962}

func TestAuditOracle(t *testing.T) {
	db := pgtest.New(t)
	pool, err := pg.Open(context.Background(), &config.Database{DSN: config.Secret(db.URL), MaxConnections: 2, StatementTimeout: 10 * time.Second, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	seeds := slices.Clone(oracleRegressions)
	for s := *oracleSeedFrom; s < *oracleSeedFrom+int64(*oracleSeeds); s++ {
		seeds = append(seeds, s)
	}
	if *oracleOnly != 0 {
		seeds = []int64{*oracleOnly}
	}
	tally := &oTally{}
	for _, s := range seeds {
		t.Run(fmt.Sprintf("kfake/seed=%d", s), func(t *testing.T) {
			runOracle(t, db, pool, kafkatest.New(t, 1), s, tally)
		})
	}
	t.Logf("oracle: %d seeds, %+v", len(seeds), *tally)
	if len(seeds) >= 20 && (tally.missing == 0 || tally.unmarked == 0 || tally.dead == 0 || tally.dups == 0 ||
		tally.malformed == 0 || tally.shortened == 0 || tally.flagged == 0) {
		t.Errorf("the seeds left a finding kind unexercised: %+v", *tally)
	}
	for i, s := range seeds {
		if i >= *oracleKafkaSeeds {
			break
		}
		t.Run(fmt.Sprintf("kafka/seed=%d", s), func(t *testing.T) {
			runOracle(t, db, pool, kafkatest.Shared(t), s, nil)
		})
	}
}

// oracleRun is one seed's history on one Kafka.
type oracleRun struct {
	t     *testing.T
	c     *oracleCase
	db    *pgtest.DB
	pool  *pgxpool.Pool
	env   kafkatest.Env
	prod  *kgo.Client
	table string
	ob    *config.Outbox
	cfg   *config.Audit
	tally *oTally
	// compacted: the topics have cleanup.policy=compact.
	compacted bool
}

// oAuditor is the oracle's side of one auditor's life.
type oAuditor struct {
	a           *Auditor
	start       time.Time
	snap        map[topicPartition]*oPartition // the topics as the auditor found them
	live        []oRecord                      // produced after its start
	firstSeen   map[string]time.Time
	checkedUpTo time.Time
	checked     uint64
}

type oPartition struct {
	logStart int64
	recs     []oRecord // retained, by offset
}

func runOracle(t *testing.T, db *pgtest.DB, pool *pgxpool.Pool, env kafkatest.Env, seed int64, tally *oTally) {
	base := time.Now().Truncate(time.Second)
	c := newOracleCase(seed, base)
	t.Log(c, ", compacted: ", seed%6 == 0)
	r := &oracleRun{t: t, c: c, db: db, pool: pool, env: env, tally: tally}
	var err error
	r.prod, err = kgo.NewClient(kgo.SeedBrokers(env.Brokers()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.prod.Close)
	name := kafkatest.Name(t)
	c.topics = []string{name + ".a", name + ".b"}
	// One kfake seed in six has compacted topics (compacted on demand; a
	// real broker compacts when it likes, so TestAuditCompaction covers it).
	kf, _ := env.(*kafkatest.Cluster)
	r.compacted = kf != nil && seed%6 == 0
	r.createTopic(c.topics[0], 2)
	r.createTopic(c.topics[1], 1)
	r.setup()

	recs := c.initial()
	r.writeRows(c.rows)
	r.produce(recs)
	if r.compacted {
		kf.Compact()
	}
	r.trim()
	a := r.startAuditor(base)
	r.check(a, base, false)
	changed, live := c.live(base, base.Add(c.delta))
	r.writeRows(changed)
	a.a.setClock(func() time.Time { return base.Add(c.delta) })
	r.produce(live)
	a.live = append(a.live, live...)
	r.check(a, base.Add(c.delta), true)
	a.a.Close()

	// A restart, perhaps after retention deleted more.
	if r.compacted {
		kf.Compact()
	}
	r.trim()
	restart := base.Add(c.delta)
	b := r.startAuditor(restart)
	r.check(b, restart, false)
	changed, live = c.live(restart, restart.Add(c.delta))
	r.writeRows(changed)
	b.a.setClock(func() time.Time { return restart.Add(c.delta) })
	r.produce(live)
	b.live = append(b.live, live...)
	r.check(b, restart.Add(c.delta), true)
}

func (r *oracleRun) createTopic(name string, partitions int32) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := kadm.NewClient(r.prod)
	var configs map[string]*string
	if r.compacted {
		compact := "compact"
		configs = map[string]*string{"cleanup.policy": &compact}
	}
	resp, err := adm.CreateTopic(ctx, partitions, 1, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		r.t.Fatalf("create topic %s: %v", name, err)
	}
	for {
		ends, err := adm.ListEndOffsets(ctx, name)
		if err == nil && ends.Error() == nil && len(ends[name]) == int(partitions) {
			return
		}
		if ctx.Err() != nil {
			r.t.Fatalf("topic %s not ready: %v", name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// setup creates the seed's table and its configuration.
func (r *oracleRun) setup() {
	c := r.c
	kind := r.env.Real()
	r.table = fmt.Sprintf("public.oracle_%d_%v", c.seed, kind)
	idType := []string{"text", "uuid", "bigint"}[c.idKind]
	cols := []string{"event_id " + idType + " PRIMARY KEY", "created_at " + c.tsType + " NOT NULL", "body text NOT NULL DEFAULT '" + secretBody + "'"}
	ob := &config.Outbox{Table: r.table, ID: "event_id", CreatedAt: "created_at"}
	switch c.style {
	case styleStatusText, styleStatusNoPublishedAt:
		cols = append(cols, "status text")
		ob.Status, ob.Pending, ob.InFlight, ob.Unknown = "status", []string{"PENDING"}, []string{"CLAIMED"}, []string{"UNKNOWN"}
		ob.Published, ob.Dead = []string{"PUBLISHED"}, []string{"ABANDONED"}
	case styleStatusInt:
		cols = append(cols, "status integer")
		ob.Status, ob.Pending, ob.InFlight, ob.Unknown = "status", []string{"0"}, []string{"1"}, []string{"4"}
		ob.Published, ob.Dead = []string{"2"}, []string{"3"}
	}
	switch c.style {
	case styleStatusText, styleStatusInt:
		cols = append(cols, "published_at "+c.tsType)
		ob.PublishedAt = "published_at"
	case styleTimestamps:
		cols = append(cols, "published_at "+c.tsType, "dead_at "+c.tsType, "lease_until "+c.tsType)
		ob.PublishedAt, ob.DeadAt, ob.LeaseUntil = "published_at", "dead_at", "lease_until"
	}
	r.db.Exec(r.t, fmt.Sprintf("DROP TABLE IF EXISTS %s; CREATE TABLE %s (%s)", r.table, r.table, strings.Join(cols, ", ")))
	r.t.Cleanup(func() { r.db.Exec(r.t, "DROP TABLE IF EXISTS "+r.table) })
	r.ob = ob
	r.cfg = &config.Audit{Kafka: "main", Topics: c.topics, EventID: c.source, Sample: c.sample, Grace: c.grace, Window: c.window}
}

// writeRows inserts, updates or deletes rows to match the generator.
func (r *oracleRun) writeRows(rows []*oRow) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := &pgx.Batch{}
	ts := func(t *time.Time) any {
		if t == nil {
			return nil
		}
		return t.UTC()
	}
	for _, row := range rows {
		b.Queue("DELETE FROM "+r.table+" WHERE event_id::text = $1", row.id)
		if row.deleted {
			continue
		}
		cols, vals := []string{"event_id", "created_at"}, []any{row.id, row.created.UTC()}
		if r.ob.Status != "" {
			cols, vals = append(cols, "status"), append(vals, row.status)
		}
		if r.ob.PublishedAt != "" {
			cols, vals = append(cols, "published_at"), append(vals, ts(row.published))
		}
		if r.ob.DeadAt != "" {
			cols, vals = append(cols, "dead_at"), append(vals, ts(row.dead))
		}
		if r.ob.LeaseUntil != "" {
			cols, vals = append(cols, "lease_until"), append(vals, ts(row.lease))
		}
		ph := make([]string, len(cols))
		for i := range cols {
			// Text in, cast by the column: status text or integer, ids
			// text, uuid or bigint.
			ph[i] = fmt.Sprintf("$%d", i+1)
			if i == 0 || (cols[i] == "status") {
				ph[i] = fmt.Sprintf("$%d::text::%s", i+1, r.colType(cols[i]))
			}
		}
		b.Queue(fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", r.table, strings.Join(cols, ", "), strings.Join(ph, ", ")), vals...)
	}
	conn, err := pgx.Connect(ctx, r.db.URL)
	if err != nil {
		r.t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		r.t.Fatalf("write rows: %v", err)
	}
}

func (r *oracleRun) colType(col string) string {
	if col == "status" {
		if r.c.style == styleStatusInt {
			return "integer"
		}
		return "text"
	}
	return []string{"text", "uuid", "bigint"}[r.c.idKind]
}

// produce writes records in time order, so each partition's timestamps
// rise with its offsets as a relay's do.
func (r *oracleRun) produce(recs []oRecord) {
	if len(recs) == 0 {
		return
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].ts.Before(recs[j].ts) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var krs []*kgo.Record
	for i, rec := range recs {
		kr := &kgo.Record{Topic: rec.topic, Partition: rec.part, Timestamp: rec.ts, Key: []byte(fmt.Sprintf("agg-%d", i%7))}
		switch r.c.source {
		case "header:event_id":
			if rec.id != "" {
				kr.Headers = []kgo.RecordHeader{{Key: "event_id", Value: []byte(rec.id)}}
			}
			kr.Value = []byte(`{"body":"` + secretBody + `"}`)
		case "key":
			kr.Key = nil
			if rec.id != "" {
				kr.Key = []byte(rec.id)
			}
		default:
			v := `{"schema":{"id":"x"},"payload":{"body":"` + secretBody + `"}}`
			if rec.id != "" {
				id, _ := json.Marshal(rec.id)
				if r.c.idKind == 2 && !r.c.mismatch {
					id = []byte(rec.id) // a JSON number
				}
				v = `{"schema":{"id":"x"},"payload":{"body":"` + secretBody + `","id":` + string(id) + `}}`
			}
			kr.Value = []byte(v)
		}
		krs = append(krs, kr)
	}
	if err := r.prod.ProduceSync(ctx, krs...).FirstErr(); err != nil {
		r.t.Fatalf("produce: %v", err)
	}
}

// trim deletes the first records of some partitions, as retention does.
func (r *oracleRun) trim() {
	snap := r.snapshot()
	var os kadm.Offsets
	for _, tp := range sortedParts(snap) {
		p := snap[tp]
		if len(p.recs) == 0 || r.c.rng.IntN(3) != 0 {
			continue
		}
		os.Add(kadm.Offset{Topic: tp.topic, Partition: tp.partition, At: p.logStart + 1 + int64(r.c.rng.IntN(len(p.recs)))})
	}
	if len(os) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(r.prod).DeleteRecords(ctx, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		r.t.Fatalf("delete records: %v", err)
	}
}

func sortedParts(snap map[topicPartition]*oPartition) []topicPartition {
	var tps []topicPartition
	for tp := range snap {
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].topic != tps[j].topic {
			return tps[i].topic < tps[j].topic
		}
		return tps[i].partition < tps[j].partition
	})
	return tps
}

// snapshot is the brute-force read of the topics: every retained record
// of every partition, from its log start, with the id as the README says
// the audit reads it.
func (r *oracleRun) snapshot() map[topicPartition]*oPartition {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := kadm.NewClient(r.prod)
	starts, err := adm.ListStartOffsets(ctx, r.c.topics...)
	if err != nil || starts.Error() != nil {
		r.t.Fatalf("list start offsets: %v %v", err, starts.Error())
	}
	ends, err := adm.ListEndOffsets(ctx, r.c.topics...)
	if err != nil || ends.Error() != nil {
		r.t.Fatalf("list end offsets: %v %v", err, ends.Error())
	}
	snap := map[topicPartition]*oPartition{}
	want := map[topicPartition]int64{}
	starts.Each(func(o kadm.ListedOffset) {
		tp := topicPartition{o.Topic, o.Partition}
		snap[tp] = &oPartition{logStart: o.Offset}
		if e, ok := ends.Lookup(o.Topic, o.Partition); ok && e.Offset > o.Offset {
			want[tp] = e.Offset
		}
	})
	if len(want) == 0 {
		return snap
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.env.Brokers()...), kgo.ConsumeTopics(r.c.topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		r.t.Fatal(err)
	}
	defer cl.Close()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			r.t.Fatalf("read the topics: %v (left %v)", ctx.Err(), want)
		}
		fs.EachRecord(func(kr *kgo.Record) {
			tp := topicPartition{kr.Topic, kr.Partition}
			if end, ok := want[tp]; ok && kr.Offset+1 >= end {
				delete(want, tp)
			}
			snap[tp].recs = append(snap[tp].recs, oRecord{topic: kr.Topic, part: kr.Partition, id: r.oracleID(kr), ts: kr.Timestamp})
		})
	}
	return snap
}

// oracleID reads a record's event id the plain way: the header, the key,
// or the dotted path through the decoded JSON value.
func (r *oracleRun) oracleID(kr *kgo.Record) string {
	switch r.c.source {
	case "header:event_id":
		for _, h := range kr.Headers {
			if h.Key == "event_id" {
				return string(h.Value)
			}
		}
		return ""
	case "key":
		return string(kr.Key)
	}
	d := json.NewDecoder(bytes.NewReader(kr.Value))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return ""
	}
	for _, f := range strings.Split(strings.TrimPrefix(r.c.source, "json:"), ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[f]
	}
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	}
	return ""
}

func (r *oracleRun) startAuditor(at time.Time) *oAuditor {
	snap := r.snapshot()
	a, err := New("messages", r.cfg, r.ob, &config.Kafka{Brokers: r.env.Brokers()}, r.pool, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	a.manual = true
	a.setClock(func() time.Time { return at })
	ctx, cancel := context.WithCancel(context.Background())
	a.Start(ctx)
	r.t.Cleanup(func() { cancel(); a.Close() })
	waitReady(r.t, a)
	return &oAuditor{a: a, start: at, snap: snap, firstSeen: map[string]time.Time{}, checkedUpTo: at}
}

// sampledID is the README's sampling rule: the first 32 bits of the MD5
// of the id's text, big-endian, below sample·2³².
func (r *oracleRun) sampledID(id string) bool {
	if r.c.sample >= 1 {
		return true
	}
	sum := md5.Sum([]byte(id)) //nolint:gosec // as the README states it
	return uint64(binary.BigEndian.Uint32(sum[:4])) < uint64(r.c.sample*(1<<32))
}
