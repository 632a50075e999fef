package kafka

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

// oracleSeeds is how many generated histories TestKafkaOracle checks; CI
// runs the default, more with -kafka.seeds N (seeds 1..N).
var oracleSeeds = flag.Int("kafka.seeds", 2, "generated Kafka histories checked against Kafka's own ConsumerGroupCommand")

// oracleFaultSeeds are seeds that once found a fault; they run always.
// Seeds 4 and 6: share-partitions the group had not fetched from yet
// (start offset and lag -1) were counted as unknown, making the whole
// collection partial.
var oracleFaultSeeds = []uint64{4, 6}

// history is what one seed wrote: a topic, its groups, and when each
// record was written (its timestamp is kafkaBase plus its index).
type history struct {
	topic  string
	groups []string
	parts  int32
	// open is the producer of the transaction left open on partition
	// openPart (nil: none); openAt is that transaction's first offset.
	open     *kgo.Client
	openPart int32
	openAt   int64
	at       time.Time // the clock of the scrape
	n        *int      // records written so far
	// marks is the end mark of each partition once written.
	marks *map[int32]int64
	// share is the share group, "" when the seed has none.
	share string
	// timedOut is the transaction the broker aborted on its timeout.
	timedOut *timedOut
	// live are the groups with a live member that never commits.
	live []string
}

// TestKafkaOracle generates seeded histories on the real broker (plain
// records, committed, aborted and open transactions, a transaction the
// broker aborts on its timeout, DeleteRecords, commits anywhere including
// on markers, a partition added after the commits, KIP-848 and classic
// groups whose live member never commits) and compares, partition by
// partition, the exporter's offset lag with Kafka's own
// ConsumerGroupCommand, and its time lag with the records as a
// read_committed or read_uncommitted consumer reads them from the start.
func TestKafkaOracle(t *testing.T) {
	b := kafkatest.Shared(t)
	seeds := append([]uint64(nil), oracleFaultSeeds...)
	for s := uint64(1); s <= uint64(*oracleSeeds); s++ {
		if !slices.Contains(seeds, s) {
			seeds = append(seeds, s)
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			e := realEnv(t)
			k := kafkaCfg(e.Brokers(), e.pat("/g.*/"))
			k.PerPartition = true
			k.ShareGroups = []string{e.pat("/s.*/")}
			h := generate(t, e, k, rand.New(rand.NewPCG(seed, 27)), rand.New(rand.NewPCG(seed, 28)))
			checkOracle(t, b, k, h)
		})
	}
}

// generate writes one seeded history and returns it. The steps added
// after the fault seeds were found (a transaction aborted on its timeout,
// live members, isolations) draw from later, a second stream of the seed,
// so that the first steps make the draws they made then (a draw bounded by
// an offset can still land elsewhere).
func generate(t *testing.T, e kenv, k *config.Kafka, rng, later *rand.Rand) history {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cl, adm := kafkaAdmin(t, k)
	h := history{topic: e.n("t"), parts: 1 + rng.Int32N(3), n: new(int), marks: &map[int32]int64{}}
	if _, err := adm.CreateTopic(ctx, h.parts, 1, nil, h.topic); err != nil {
		t.Fatal(err)
	}
	tx, err := kafkaclient.New(k, kgo.TransactionalID(e.n("tx")), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	for p := int32(0); p < h.parts; p++ {
		produceRandom(ctx, t, &h, cl, tx, p, rng)
	}
	abortedByTimeout(t, &h, e, k, cl, adm, later)
	ends := listed(t, adm.ListEndOffsets, h.topic)
	deleteSome(ctx, t, &h, adm, ends, rng)
	// Groups commit anywhere up to the high watermark, markers included.
	for g := range 1 + rng.IntN(3) {
		name := e.n(fmt.Sprintf("g%d", g))
		h.groups = append(h.groups, name)
		at := map[int32]int64{}
		for p := int32(0); p < h.parts; p++ {
			if p == 0 || rng.IntN(4) > 0 {
				at[p] = rng.Int64N(ends[p] + 1)
			}
		}
		commit(t, adm, name, h.topic, at)
	}
	// A partition added after the commits, and an open transaction on
	// the last partition.
	if rng.IntN(2) == 0 {
		addPartition(ctx, t, &h, cl, adm)
	}
	if rng.IntN(2) == 0 {
		openTransaction(ctx, t, &h, e, k)
	}
	if rng.IntN(3) > 0 {
		h.share = e.n("s0")
		shareAckSome(t, k, cl, h.share, h.topic, rng)
	}
	joinLive(t, &h, e, k, adm, later)
	readUncommittedGroups(&h, k, later)
	ru := slices.DeleteFunc(slices.Clone(h.groups), func(g string) bool { return !k.ReadUncommitted(g) })
	t.Logf("history: %d partitions, groups %v (read_uncommitted: %v), live %v, timed out %+v, open on %d at %d (%v), share %q",
		h.parts, h.groups, ru, h.live, *h.timedOut, h.openPart, h.openAt, h.open != nil, h.share)
	h.at = kafkaBase.Add(time.Duration(*h.n+100) * time.Second)
	return h
}

// produceRandom writes a few batches to partition p, each plain,
// committed in a transaction or aborted.
func produceRandom(ctx context.Context, t *testing.T, h *history, cl, tx *kgo.Client, p int32, rng *rand.Rand) {
	t.Helper()
	for range 2 + rng.IntN(5) {
		var rs []*kgo.Record
		for range 1 + rng.IntN(4) {
			rs = append(rs, h.rec(p))
		}
		switch op := rng.IntN(3); op {
		case 0:
			if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		default:
			if err := tx.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := tx.ProduceSync(ctx, rs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			end := kgo.TryCommit
			if op == 2 {
				end = kgo.TryAbort
			}
			if err := tx.EndTransaction(ctx, end); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// deleteSome deletes the records below a random offset on some
// partitions.
func deleteSome(ctx context.Context, t *testing.T, h *history, adm *kadm.Client, ends map[int32]int64, rng *rand.Rand) {
	t.Helper()
	del := kadm.Offsets{}
	for p := int32(0); p < h.parts; p++ {
		if rng.IntN(3) == 0 {
			del.Add(kadm.Offset{Topic: h.topic, Partition: p, At: rng.Int64N(ends[p] + 1)})
		}
	}
	if len(del) > 0 {
		if _, err := adm.DeleteRecords(ctx, del); err != nil {
			t.Fatal(err)
		}
	}
}

// addPartition adds a partition to the topic and writes two records to it.
func addPartition(ctx context.Context, t *testing.T, h *history, cl *kgo.Client, adm *kadm.Client) {
	t.Helper()
	if _, err := adm.CreatePartitions(ctx, 1, h.topic); err != nil {
		t.Fatal(err)
	}
	// The producer learns of the new partition from fresh metadata.
	rs := []*kgo.Record{h.rec(h.parts), h.rec(h.parts)}
	for {
		cl.ForceMetadataRefresh()
		err := cl.ProduceSync(ctx, rs...).FirstErr()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("produce to the added partition: %v", err)
		}
	}
	h.parts++
}

// openTransaction leaves a transaction of two records open on the last
// partition.
func openTransaction(ctx context.Context, t *testing.T, h *history, e kenv, k *config.Kafka) {
	t.Helper()
	open, err := kafkaclient.New(k, kgo.TransactionalID(e.n("open")), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(open.Close)
	if err := open.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	r := h.rec(h.parts - 1)
	if err := open.ProduceSync(ctx, r, h.rec(h.parts-1)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	h.open, h.openPart, h.openAt = open, h.parts-1, r.Offset
}

// rec is the next record of the history for partition p.
func (h history) rec(p int32) *kgo.Record {
	*h.n++
	return &kgo.Record{Topic: h.topic, Partition: p, Value: []byte("v"), Timestamp: kafkaBase.Add(time.Duration(*h.n) * time.Second)}
}

// checkOracle scrapes the exporter and compares it with Kafka's tool and
// with the records as each group's consumers read them (read_committed or
// read_uncommitted, read from the start).
func checkOracle(t *testing.T, b *kafkatest.Broker, k *config.Kafka, h history) {
	_, adm := kafkaAdmin(t, k)
	starts := listed(t, adm.ListStartOffsets, h.topic)
	ends := listed(t, adm.ListEndOffsets, h.topic)
	stable := maps.Clone(ends)
	if h.open != nil {
		stable[h.openPart] = h.openAt
	}
	var got map[string]float64
	if h.share != "" {
		// On Apache Kafka a share group's offsets come from the share
		// coordinator's log.
		got = scrapeShares(t, k, h.at, true)
	} else {
		got = scrapeAt(t, k, h.at)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rows, out, err := b.ConsumerGroupLag(ctx, h.groups...)
	if err != nil {
		t.Fatal(err)
	}
	// Kafka's share tool runs before the end marks are written too.
	var share shareTool
	if h.share != "" {
		share.rows, share.out, err = b.ShareGroupLag(ctx, h.share)
		if err != nil {
			t.Fatal(err)
		}
	}
	committed := readCommitted(t, k, h)
	uncommitted := readRecords(t, k, h, kgo.ReadUncommitted())
	checkTimedOut(t, h, starts, committed, uncommitted)
	for _, g := range h.groups {
		// A read_committed consumer reads data records below the last
		// stable offset, a read_uncommitted one all data records below
		// the high watermark.
		read := groupRead{records: committed, bound: stable}
		if k.ReadUncommitted(g) {
			read = groupRead{records: uncommitted, bound: ends}
		}
		checkGroup(t, h, g, rows, got, starts, read)
	}
	checkLive(t, h, rows, got)
	if t.Failed() {
		t.Logf("ConsumerGroupCommand:\n%s", out)
	}
	if h.share != "" {
		checkShareOracle(t, h, share, got, starts, ends, uncommitted)
	}
}

// groupRead is what a group's consumers read of each partition: records,
// and the offset they read up to at the scrape.
type groupRead struct {
	records map[int32][]visibleRecord
	bound   map[int32]int64
}

// checkGroup compares group g's series with Kafka's rows (LAG by
// partition, summed) and with the age of the first record its consumers
// still have to read.
func checkGroup(t *testing.T, h history, g string, rows []kafkatest.LagRow, got map[string]float64, starts map[int32]int64, read groupRead) {
	commits := map[int32]int64{}
	var lag int64
	for _, r := range rows {
		if r.Group != g || r.Topic != h.topic {
			continue
		}
		pk := fmt.Sprintf("outbox_consumer_partition_lag_messages{group=%s,partition=%d,topic=%s}", g, r.Partition, h.topic)
		if !r.LagOK {
			sk := fmt.Sprintf("outbox_consumer_partition_lag_seconds{group=%s,partition=%d,topic=%s}", g, r.Partition, h.topic)
			for _, k := range []string{pk, sk} {
				if _, ok := got[k]; ok {
					t.Errorf("%s: Kafka shows no lag, the exporter %v", k, got[k])
				}
			}
			continue
		}
		commits[r.Partition] = r.Offset
		lag += r.Lag
		if got[pk] != float64(r.Lag) {
			t.Errorf("%s = %v, Kafka's LAG %d", pk, got[pk], r.Lag)
		}
	}
	var lost int64
	var secs float64
	for p, c := range commits {
		lost += max(starts[p]-c, 0)
		from := max(c, starts[p])
		ps := 0.0
		for _, v := range read.records[p] {
			if v.off >= from && v.off < read.bound[p] {
				ps = h.at.Sub(v.ts).Seconds()
				break
			}
		}
		secs = max(secs, ps)
		if sk := fmt.Sprintf("outbox_consumer_partition_lag_seconds{group=%s,partition=%d,topic=%s}", g, p, h.topic); got[sk] != ps {
			t.Errorf("%s = %v, the records say %v", sk, got[sk], ps)
		}
	}
	wantSeries(t, got, map[string]float64{
		lagKey("outbox_consumer_lag_messages", g, h.topic):            float64(lag),
		lagKey("outbox_consumer_lag_seconds", g, h.topic):             secs,
		lagKey("outbox_consumer_retention_lost_messages", g, h.topic): float64(lost),
		lagKey("outbox_consumer_uncommitted_partitions", g, h.topic):  float64(int(h.parts) - len(commits)),
	}, 0.001)
}

// visibleRecord is a data record a read_committed consumer reads.
type visibleRecord struct {
	off int64
	ts  time.Time
}

// readCommitted ends the open transaction (aborted), writes one plain
// record to every partition as an end mark, and reads every partition
// from its log start with read_committed isolation up to the marks.
// Records at or after the scrape's last stable offset are told apart by
// the caller.
func readCommitted(t *testing.T, k *config.Kafka, h history) map[int32][]visibleRecord {
	return readRecords(t, k, h, kgo.ReadCommitted())
}

// readRecords is readCommitted with isolation iso; only the first call of
// a history ends the open transaction and writes the end marks.
func readRecords(t *testing.T, k *config.Kafka, h history, iso kgo.IsolationLevel) map[int32][]visibleRecord {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if h.marks != nil && len(*h.marks) > 0 {
		return consumeToMarks(t, k, h, iso, *h.marks)
	}
	if h.open != nil {
		if err := h.open.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Fatal(err)
		}
	}
	cl, _ := kafkaAdmin(t, k)
	marks := *h.marks
	for p := int32(0); p < h.parts; p++ {
		r := h.rec(p)
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		marks[p] = r.Offset
	}
	return consumeToMarks(t, k, h, iso, marks)
}

// consumeToMarks reads every partition of h from its log start with
// isolation iso up to its end mark.
func consumeToMarks(t *testing.T, k *config.Kafka, h history, iso kgo.IsolationLevel, marks map[int32]int64) map[int32][]visibleRecord {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := kafkaclient.New(k, kgo.ConsumeTopics(h.topic), kgo.FetchIsolationLevel(iso),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out := map[int32][]visibleRecord{}
	for done := 0; done < int(h.parts); {
		fs := c.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read_committed read of %s: %d of %d partitions up to their end marks", h.topic, done, h.parts)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], visibleRecord{r.Offset, r.Timestamp})
			if r.Offset == marks[r.Partition] {
				done++
			}
		})
	}
	return out
}

// listed lists offsets of topic by partition.
func listed(t *testing.T, list func(context.Context, ...string) (kadm.ListedOffsets, error), topic string) map[int32]int64 {
	t.Helper()
	os, err := list(kafkaCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	os.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}
