package kafka

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

// The history generator's later steps: a transaction the broker aborts on
// its timeout, groups whose one live member never commits, and the
// isolation each group reads with. Their random draws come from a second
// stream of the seed, so that the earlier steps draw what they always drew.

// txnTimeout is the transaction.timeout.ms of the transaction left for
// the broker to abort: long enough that a produce on a busy machine lands
// well before it (the timer starts when the partition joins the
// transaction), short enough not to slow the test much. The test broker
// looks for timed-out transactions every 250 ms (kafkatest.Options.TxnAbortInterval).
const txnTimeout = 5 * time.Second

// timedOut is a transaction the broker aborted on its timeout: records
// first..last on partition part.
type timedOut struct {
	part        int32
	first, last int64
}

// abortedByTimeout writes 1-4 records to a random partition in a
// transaction with a short timeout and never ends it: it waits, with a
// deadline, until the partition's last stable offset has passed the
// records (only the abort marker ends that transaction), and only then
// closes the producer (closing a franz-go producer does not end its
// transaction either). Two groups commit at its first record, one reading
// with read_committed isolation, one with read_uncommitted, so that every
// seed has the case (Kafka's LAG counts the aborted records and the
// marker; only a read_uncommitted consumer has them to read). A seeded
// half of the histories then write plain records after it, so that a
// read_committed group's first record to read lies past the aborted ones.
func abortedByTimeout(t *testing.T, h *history, e kenv, k *config.Kafka, cl *kgo.Client, adm *kadm.Client, rng *rand.Rand) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p := rng.Int32N(h.parts)
	pr, err := kafkaclient.New(k, kgo.TransactionalID(e.n("timeout")), kgo.TransactionTimeout(txnTimeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if err := pr.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	var rs []*kgo.Record
	for range 1 + rng.IntN(4) {
		rs = append(rs, h.rec(p))
	}
	// One ProduceSync: the records go in one batch, well within the
	// timeout.
	if err := pr.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce the transaction left to time out: %v", err)
	}
	h.timedOut = &timedOut{part: p, first: rs[0].Offset, last: rs[len(rs)-1].Offset}
	waitStable(ctx, t, adm, h.topic, p, h.timedOut.last+1)
	if rng.IntN(2) == 0 {
		if err := cl.ProduceSync(ctx, h.rec(p), h.rec(p)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if k.Isolations == nil {
		k.Isolations = map[string]string{}
	}
	for i, iso := range []string{config.IsolationReadCommitted, config.IsolationReadUncommitted} {
		g := e.n(fmt.Sprintf("gt%d", i))
		h.groups = append(h.groups, g)
		k.Isolations[g] = iso
		commit(t, adm, g, h.topic, map[int32]int64{p: h.timedOut.first})
	}
}

// waitStable waits until partition p of topic has a last stable offset of
// at least want and a high watermark past it (the marker), or fails when
// ctx ends.
func waitStable(ctx context.Context, t *testing.T, adm *kadm.Client, topic string, p int32, want int64) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var lso, hwm kadm.ListedOffset
	for {
		stable, err1 := adm.ListCommittedOffsets(ctx, topic)
		ends, err2 := adm.ListEndOffsets(ctx, topic)
		if err1 == nil && err2 == nil {
			lso, _ = stable.Lookup(topic, p)
			hwm, _ = ends.Lookup(topic, p)
			if lso.Err == nil && hwm.Err == nil && lso.Offset >= want && hwm.Offset > want {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s[%d]: the broker never aborted the transaction: last stable offset %d (want %d), high watermark %d (want more) (%v, %v)",
				topic, p, lso.Offset, want, hwm.Offset, err1, err2)
		case <-tick.C:
		}
	}
}

// joinLive makes two groups, a KIP-848 one and a classic one, each with
// one live member subscribed to the topic that never commits; a seeded
// half of them had commits on some partitions before (not all). It waits
// until each member holds every partition, as Kafka's tool then lists
// them.
func joinLive(t *testing.T, h *history, e kenv, k *config.Kafka, adm *kadm.Client, rng *rand.Rand) {
	t.Helper()
	ends := listed(t, adm.ListEndOffsets, h.topic)
	for i, kip848 := range []bool{true, false} {
		name := e.n(fmt.Sprintf("gl%d", i))
		h.groups = append(h.groups, name)
		h.live = append(h.live, name)
		if h.parts > 1 && rng.IntN(2) == 0 {
			at := map[int32]int64{}
			for p := range rng.Int32N(h.parts) + 1 {
				if p > 0 || rng.IntN(2) == 0 {
					at[p] = rng.Int64N(ends[p] + 1)
				}
			}
			if len(at) < int(h.parts) {
				commit(t, adm, name, h.topic, at)
			}
		}
		opts := []kgo.Opt{kgo.ConsumerGroup(name), kgo.ConsumeTopics(h.topic), kgo.DisableAutoCommit()}
		if kip848 {
			opts = append(opts, kgo.ServerSideBalancer())
		}
		c, err := kafkaclient.New(k, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
	}
	waitAssigned(t, adm, h)
}

// waitAssigned waits until each live group of h has one member holding
// all partitions of the topic.
func waitAssigned(t *testing.T, adm *kadm.Client, h *history) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	kip848, classic := h.live[0], h.live[1]
	var last string
	for {
		nd, err1 := adm.DescribeConsumerGroups(ctx, kip848)
		od, err2 := adm.DescribeGroups(ctx, classic)
		d848, dcl := nd[kip848], od[classic]
		n848 := len(d848.AssignedPartitions()[h.topic])
		ncl := len(dcl.AssignedPartitions()[h.topic])
		if err1 == nil && err2 == nil && len(d848.Members) == 1 && len(dcl.Members) == 1 &&
			n848 == int(h.parts) && ncl == int(h.parts) && dcl.State == "Stable" {
			return
		}
		last = fmt.Sprintf("KIP-848 %s: %d members, %d partitions (%v); classic %s: %s, %d members, %d partitions (%v)",
			d848.State, len(d848.Members), n848, err1, dcl.State, dcl.State, len(dcl.Members), ncl, err2)
		select {
		case <-ctx.Done():
			t.Fatalf("live members never held all %d partitions: %s", h.parts, last)
		case <-tick.C:
		}
	}
}

// checkLive compares, for the live groups, Kafka's rows with the
// exporter: Kafka lists every partition, with LAG "-" where the group has
// no commit, and the exporter counts those as uncommitted partitions of a
// group with one member.
func checkLive(t *testing.T, h history, rows []kafkatest.LagRow, got map[string]float64) {
	for _, g := range h.live {
		var listed, dash int
		for _, r := range rows {
			if r.Group == g && r.Topic == h.topic {
				listed++
				if !r.LagOK {
					dash++
				}
			}
		}
		if listed != int(h.parts) {
			t.Errorf("live group %s: Kafka lists %d partitions of %d", g, listed, h.parts)
		}
		wantSeries(t, got, map[string]float64{
			lagKey("outbox_consumer_uncommitted_partitions", g, h.topic): float64(dash),
			lagKey("outbox_consumer_group_members", g, ""):               1,
		}, 0)
	}
}

// readUncommittedGroups makes a seeded half of h's groups that have no
// isolation yet read with read_uncommitted isolation
// (kafka.NAME.isolations).
func readUncommittedGroups(h *history, k *config.Kafka, rng *rand.Rand) {
	if k.Isolations == nil {
		k.Isolations = map[string]string{}
	}
	for _, g := range h.groups {
		if _, ok := k.Isolations[g]; !ok && rng.IntN(2) == 0 {
			k.Isolations[g] = config.IsolationReadUncommitted
		}
	}
}

// checkTimedOut checks that the brute force saw the transaction the
// broker timed out as aborted: a read_uncommitted reader got its records
// (those DeleteRecords left), a read_committed one none of them.
func checkTimedOut(t *testing.T, h history, starts map[int32]int64, committed, uncommitted map[int32][]visibleRecord) {
	x := h.timedOut
	if x == nil {
		return
	}
	left := max(x.last+1-max(x.first, starts[x.part]), 0)
	in := func(rs []visibleRecord) (n int) {
		for _, r := range rs {
			if r.off >= x.first && r.off <= x.last {
				n++
			}
		}
		return n
	}
	if n := in(committed[x.part]); n != 0 {
		t.Errorf("read_committed read %d records of the transaction the broker should have aborted (%d-%d on %d)", n, x.first, x.last, x.part)
	}
	if n := in(uncommitted[x.part]); int64(n) != left {
		t.Errorf("read_uncommitted read %d records of the timed-out transaction %d-%d on %d, want the %d left", n, x.first, x.last, x.part, left)
	}
}
