package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// On Apache Kafka the share groups' offsets come from the share
// coordinator's own log, read as Burrow reads __consumer_offsets: the
// records are replayed into the state the coordinator holds
// (sharerecord.go), and each share-partition's lag is the broker's
// formula over the high watermark the collection lists anyway. A scrape
// then reads only the records written since the last one (one Fetch per
// broker leading a partition of the topic), instead of one
// DescribeShareGroupOffsets per group: Apache Kafka 4.4 answers those fast
// only one group at a time (shareoffsets.go), and a request per group was
// where a share group's CPU went. Where the topic cannot be read (no such
// topic, as on kfake; not authorized; a record version this reader does
// not know), the offsets are asked as before, and one log line says which
// source a cluster uses whenever that changes.

const shareStateTopic = "__share_group_state"

// shareLogRetry is how many collections ask the offsets with requests
// after the log failed, before it is tried again (a failed read starts
// again from the log start). A missing topic is looked for every time.
const shareLogRetry = 30

// Fetch sizes of the log's reads: a cold read of 240,000 share-partitions'
// snapshots is about 30 MB.
const (
	shareLogRequestBytes   = 16 << 20
	shareLogPartitionBytes = 4 << 20
	// shareLogStalls is how many rounds in a row may bring a partition
	// below its high watermark no record before the read gives up.
	shareLogStalls = 5
)

// errShareUnreadable is a record this reader cannot decode.
var errShareUnreadable = errors.New("share coordinator record not readable")

// errNoShareTopic is the log's absence: the cluster keeps no share state
// there (kfake), or no share group ever had one.
var errNoShareTopic = errors.New("no topic " + shareStateTopic)

// shareLog is the share coordinator's state read from its topic, and
// where reading stopped.
type shareLog struct {
	store *shareStore
	next  map[int32]int64
	// names is the topic names by id (shareNames); missing, the ids a
	// look-up did not find, namesAge the collections since it.
	names     map[[16]byte]string
	missing   map[[16]byte]bool
	namesAge  int
	skip      int
	fromLog   bool
	announced bool
}

// readShareLog brings the log's state up to every partition's high
// watermark. It returns false, after logging the change of source, when
// the offsets must be asked with requests this collection.
func (c *Collector) readShareLog(ctx context.Context) bool {
	l := &c.shareLog
	if l.skip > 0 {
		l.skip--
		return false
	}
	err := l.read(ctx, c.cl, c.adm, func(g string) bool { return matchAny(c.shares, g) })
	switch {
	case err == nil:
	case errors.Is(err, errShareUnreadable) || errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed):
		l.store, l.next, l.skip = nil, nil, shareLogRetry
	case errors.Is(err, errNoShareTopic) || errors.Is(err, kerr.OffsetOutOfRange):
		l.store, l.next = nil, nil
	default:
		// A broker or a leader away: what was read stays, each
		// partition up to where it was read in order, and the next
		// collection reads on from there.
	}
	if ok := err == nil; ok != l.fromLog || !l.announced {
		l.fromLog, l.announced = ok, true
		if ok {
			c.logger.Info("kafka share group offsets read from the share coordinator's log", "cluster", c.cluster, "topic", shareStateTopic)
		} else {
			c.logger.Info("kafka share group offsets asked with DescribeShareGroupOffsets: the share coordinator's log is not read",
				"cluster", c.cluster, "topic", shareStateTopic, "reason", err)
		}
	}
	return err == nil
}

// read fetches what was written since the last read, up to each
// partition's high watermark, keeping the state of the groups keep
// selects.
func (l *shareLog) read(ctx context.Context, cl *kgo.Client, adm *kadm.Client, keep func(string) bool) error {
	meta, err := adm.Metadata(ctx, shareStateTopic)
	if err != nil {
		return fmt.Errorf("metadata of %s: %w", shareStateTopic, err)
	}
	td, ok := meta.Topics[shareStateTopic]
	switch {
	case !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) || (td.Err == nil && len(td.Partitions) == 0):
		return errNoShareTopic
	case td.Err != nil:
		return fmt.Errorf("metadata of %s: %w", shareStateTopic, td.Err)
	}
	if l.store == nil {
		starts, err := adm.ListStartOffsets(ctx, shareStateTopic)
		if err != nil {
			return fmt.Errorf("log start of %s: %w", shareStateTopic, err)
		}
		l.store, l.next = newShareStore(), map[int32]int64{}
		l.store.keep = keep
		for p := range td.Partitions {
			o, ok := starts.Lookup(shareStateTopic, p)
			if !ok || o.Err != nil {
				return fmt.Errorf("log start of %s/%d: %w", shareStateTopic, p, orUnanswered(o.Err))
			}
			l.next[p] = o.Offset
		}
	}
	left := map[int32]int32{} // partition -> leader
	for p, pd := range td.Partitions {
		if pd.Err != nil || pd.Leader < 0 {
			return fmt.Errorf("%s/%d has no leader: %w", shareStateTopic, p, orUnanswered(pd.Err))
		}
		left[p] = pd.Leader
	}
	stalls := map[int32]int{}
	for len(left) > 0 {
		if err := l.round(ctx, cl, [16]byte(td.ID), left, stalls); err != nil {
			return err
		}
	}
	return nil
}

// round sends one Fetch per leader of the partitions left and replays
// the answers, in offset order per partition; a partition at its high
// watermark leaves left.
func (l *shareLog) round(ctx context.Context, cl *kgo.Client, id [16]byte, left map[int32]int32, stalls map[int32]int) error {
	byLeader := map[int32][]int32{}
	for p, leader := range left {
		byLeader[leader] = append(byLeader[leader], p)
	}
	type answer struct {
		resp *kmsg.FetchResponse
		err  error
	}
	answers := make(map[int32]answer, len(byLeader))
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for leader, parts := range byLeader {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 0
		req.MaxBytes = shareLogRequestBytes
		req.SessionEpoch = -1 // no fetch session
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = shareStateTopic, id
		for _, p := range parts {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.FetchOffset = p, l.next[p]
			rp.CurrentLeaderEpoch, rp.LogStartOffset = -1, -1
			rp.PartitionMaxBytes = shareLogPartitionBytes
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = []kmsg.FetchRequestTopic{rt}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := req.RequestWith(ctx, cl.Broker(int(leader)))
			if err == nil {
				err = kerr.ErrorForCode(resp.ErrorCode)
			}
			mu.Lock()
			answers[leader] = answer{resp, err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for leader, a := range answers {
		if a.err != nil {
			return fmt.Errorf("fetch %s from broker %d: %w", shareStateTopic, leader, a.err)
		}
		for i := range a.resp.Topics {
			for j := range a.resp.Topics[i].Partitions {
				if err := l.replay(&a.resp.Topics[i].Partitions[j], left, stalls); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// replay replays one partition's answer.
func (l *shareLog) replay(rp *kmsg.FetchResponseTopicPartition, left map[int32]int32, stalls map[int32]int) error {
	p := rp.Partition
	at, ok := l.next[p]
	if _, asked := left[p]; !ok || !asked {
		return nil
	}
	if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
		return fmt.Errorf("fetch %s/%d at %d: %w", shareStateTopic, p, at, err)
	}
	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: at, Topic: shareStateTopic, Partition: p}, rp, kgo.DefaultDecompressor(), nil)
	if fp.Err != nil {
		return fmt.Errorf("%w: %s/%d at %d: %w", errShareUnreadable, shareStateTopic, p, at, fp.Err)
	}
	for _, r := range fp.Records {
		rec, ok, err := decodeShareRecord(r.Key, r.Value)
		if err != nil {
			return fmt.Errorf("%w: %s/%d at %d: %w", errShareUnreadable, shareStateTopic, p, r.Offset, err)
		}
		if ok {
			l.store.apply(rec)
		}
	}
	l.next[p] = max(at, next)
	switch {
	case l.next[p] >= rp.HighWatermark:
		delete(left, p)
	case l.next[p] > at:
		stalls[p] = 0
	default:
		if stalls[p]++; stalls[p] >= shareLogStalls {
			return fmt.Errorf("%s/%d: no record read at %d below the high watermark %d", shareStateTopic, p, at, rp.HighWatermark)
		}
	}
	return nil
}

// shareLogTopics is each group's share-partitions from the log, by topic
// name, kept by the topic filter and sorted by partition. A partition
// without a start offset yet is left out, as the broker's answer shows
// it without one; its lag is worked out once the high watermarks are
// listed (sharesBehind).
func (c *Collector) shareLogTopics(ctx context.Context, groups []string) map[string]map[string][]sharePart {
	l := &c.shareLog
	c.shareNames(ctx)
	out := make(map[string]map[string][]sharePart, len(groups))
	// One slab for the collection's partitions, not a slice per topic.
	n := 0
	for _, g := range groups {
		n += len(l.store.groups[g])
	}
	slab := make([]sharePart, 0, n)
	for _, g := range groups {
		es := l.store.groups[g]
		if len(es) == 0 {
			continue
		}
		topics := map[string][]sharePart{}
		// The entries are sorted by topic: one name lookup and one
		// slice per topic.
		for len(es) > 0 {
			n := 1
			for n < len(es) && es[n].topic == es[0].topic {
				n++
			}
			run := es[:n]
			es = es[n:]
			name, ok := l.names[l.store.ids[run[0].topic]]
			if !ok || (c.topics != nil && !c.topics(name)) {
				continue
			}
			from := len(slab)
			for _, e := range run {
				if e.start != -1 {
					slab = append(slab, sharePart{part: e.part, spso: e.start, done: e.done, fromLog: true})
				}
			}
			parts := slab[from:len(slab):len(slab)]
			if len(parts) > 0 {
				topics[name] = parts
			}
		}
		out[g] = topics
	}
	return out
}

// shareNames looks the topic names up when the log's state names a topic
// id not known yet: on the first collection and as soon as a new topic
// appears. An id still unknown after a look-up (a deleted topic, whose
// state stays until the coordinator drops it) is looked up again only
// every shareLogRetry collections.
func (c *Collector) shareNames(ctx context.Context) {
	l := &c.shareLog
	if l.namesAge++; l.namesAge >= shareLogRetry {
		l.missing = nil
	}
	need := l.names == nil
	for _, id := range l.store.ids {
		if _, ok := l.names[id]; !ok && !l.missing[id] {
			need = true
			break
		}
	}
	if !need {
		return
	}
	// Asked of a broker, not of the client's metadata cache: a topic
	// created seconds ago must be found.
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, c.cl)
	if err != nil {
		// The partitions on unknown topics are left out this
		// collection; the next one asks again.
		return
	}
	l.names, l.namesAge, l.missing = make(map[[16]byte]string, len(resp.Topics)), 0, map[[16]byte]bool{}
	for _, rt := range resp.Topics {
		if rt.ErrorCode == 0 && rt.Topic != nil {
			l.names[rt.TopicID] = *rt.Topic
		}
	}
	for _, id := range l.store.ids {
		if _, ok := l.names[id]; !ok {
			l.missing[id] = true
		}
	}
}
