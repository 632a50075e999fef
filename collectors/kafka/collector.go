package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

var (
	kafkaLagMessagesDesc = prometheus.NewDesc(
		vocab.ConsumerLagMessages,
		"Kafka's own LAG of the consumer group on the topic, as kafka-consumer-groups --describe reports it: high watermark minus committed offset, summed over partitions, transaction markers and aborted and deleted records included (a partition without a commit counts only with kafka.NAME.uncommitted: log_start, from the log start).",
		[]string{vocab.LabelCluster, vocab.LabelGroup, vocab.LabelTopic}, nil)
	kafkaLagSecondsDesc = prometheus.NewDesc(
		vocab.ConsumerLagSeconds,
		"Age of the oldest record on the topic the consumer group has not consumed (now minus the timestamp of the record at the committed offset, largest over partitions); 0 when caught up.",
		[]string{vocab.LabelCluster, vocab.LabelGroup, vocab.LabelTopic}, nil)
	kafkaDeadlineDesc = prometheus.NewDesc(
		vocab.ConsumerDeadline,
		"Configured lag deadline of the consumer group: an event not consumed within it is late.",
		[]string{vocab.LabelCluster, vocab.LabelGroup}, nil)
	kafkaMembersDesc = prometheus.NewDesc(
		vocab.ConsumerGroupMembers,
		"Members of the consumer group; 0 when nobody consumes.",
		[]string{vocab.LabelCluster, vocab.LabelGroup}, nil)
	kafkaLostDesc = prometheus.NewDesc(
		vocab.ConsumerRetentionLost,
		"Records deleted by retention before the group consumed them: log start offset minus committed offset, summed over partitions where positive. Part of outbox_consumer_lag_messages, not in addition to it.",
		[]string{vocab.LabelCluster, vocab.LabelGroup, vocab.LabelTopic}, nil)
	kafkaGroupInfoDesc = prometheus.NewDesc(
		vocab.ConsumerGroupInfo,
		"Constant 1: the consumer group's state as the broker reports it, and its protocol (classic or consumer, KIP-848).",
		[]string{vocab.LabelCluster, vocab.LabelGroup, vocab.LabelState, "protocol"}, nil)
	kafkaUncommittedDesc = prometheus.NewDesc(
		vocab.ConsumerUncommitted,
		"Partitions of the topic the consumer group has no committed offset on, although it has members for the topic or committed to its other partitions (partitions added since): their lag is unknown, not 0, and a consumer with auto.offset.reset=latest skips what they hold.",
		[]string{vocab.LabelCluster, vocab.LabelGroup, vocab.LabelTopic}, nil)
	kafkaPartLagMessagesDesc = prometheus.NewDesc(
		vocab.ConsumerPartitionLagMessages,
		"Kafka's own LAG of the consumer group on the partition: high watermark minus committed offset (kafka.NAME.per_partition).",
		[]string{vocab.LabelCluster, vocab.LabelGroup, vocab.LabelTopic, vocab.LabelPartition}, nil)
	kafkaPartLagSecondsDesc = prometheus.NewDesc(
		vocab.ConsumerPartitionLagSeconds,
		"Age of the oldest record on the partition the consumer group has not consumed (kafka.NAME.per_partition).",
		[]string{vocab.LabelCluster, vocab.LabelGroup, vocab.LabelTopic, vocab.LabelPartition}, nil)
)

// Collector collects the lag of the configured consumer groups of one
// cluster: in records and in the age of the oldest unconsumed record. A
// scrape costs ListGroups, one describe per group type, one OffsetFetch
// per coordinator, and at once Metadata and the start and end offsets; the
// records at committed offsets are read only when a commit moved, in one
// Fetch per leader broker.
//
// The work is split: groups.go and offsets.go ask the cluster, plan.go
// decides from the answers (pure) what counts and what must be read,
// probe.go reads records, lag.go decides each partition.
type Collector struct {
	cluster string
	cfg     *config.Kafka
	groups  []Matcher
	shares  []Matcher
	topics  func(string) bool
	rule    Uncommitted
	logger  *slog.Logger

	cl     *kgo.Client
	adm    *kadm.Client
	prober *Prober
	now    func() time.Time

	// sem lets one Update run at a time: a late Update still running
	// after its scrape timed out holds the probe cache.
	sem    chan struct{}
	cache  *probeCache
	series *seriesCache
	// known is the groups selected by the last collection, by type: when
	// listing fails on some brokers, their groups are still looked up.
	known map[string]string
	// warned is the matching groups of unsupported types already logged.
	warned map[string]bool
	// shareLim is how share groups are asked; zero: the defaults.
	shareLim shareLimits
	shareMu  sync.Mutex
	shareCls []*kgo.Client
	// shareFrom is the first share group the last collection left
	// unanswered: the next one asks from it on (shareoffsets.go).
	shareFrom string
	// shareBatch chooses the offsets requests' sizes (sharebatch.go).
	shareBatch *shareBatcher
	// shareCoord is the share groups' coordinators (sharecoord.go).
	shareCoord shareCoords
	// shareLog is the share coordinator's state read from its topic
	// (sharelog.go).
	shareLog shareLog
}

// NewCollector returns the lag collector of cluster k. It does not connect
// until the first Update.
func NewCollector(cluster string, k *config.Kafka, logger *slog.Logger) (*Collector, error) {
	c := &Collector{
		cluster: cluster,
		cfg:     k,
		logger:  logger,
		now:     time.Now,
		sem:     make(chan struct{}, 1),
		cache:   newProbeCache(),
		series:  newSeriesCache(),
		known:   map[string]string{},
		warned:  map[string]bool{},
	}
	switch k.Uncommitted {
	case "", config.UncommittedIgnore:
		c.rule = IgnoreUncommitted
	case config.UncommittedLogStart:
		c.rule = FromLogStart
	default:
		return nil, fmt.Errorf("kafka %s: uncommitted %q is not ignore or log_start", cluster, k.Uncommitted)
	}
	for _, g := range k.Groups {
		p, err := config.ParsePattern(g)
		if err != nil {
			return nil, fmt.Errorf("kafka %s: group %q: %w", cluster, g, err)
		}
		c.groups = append(c.groups, p)
	}
	for _, g := range k.ShareGroups {
		p, err := config.ParsePattern(g)
		if err != nil {
			return nil, fmt.Errorf("kafka %s: share group %q: %w", cluster, g, err)
		}
		c.shares = append(c.shares, p)
	}
	var tps []Matcher
	for _, t := range k.Topics {
		p, err := config.ParsePattern(t)
		if err != nil {
			return nil, fmt.Errorf("kafka %s: topic %q: %w", cluster, t, err)
		}
		tps = append(tps, p)
	}
	c.topics = TopicFilter(tps)
	// Connections live across scrapes: kgo's default reaps them after
	// 20s idle, so every scrape at a 30s interval would dial again.
	cl, err := kafkaclient.New(k, kgo.ConnIdleTimeout(3*time.Minute))
	if err != nil {
		return nil, fmt.Errorf("kafka %s: %w", cluster, err)
	}
	c.cl = cl
	c.adm = kadm.NewClient(cl)
	c.prober = NewProber(cl)
	return c, nil
}

// Close closes the cluster's client.
func (c *Collector) Close() { c.cl.Close(); c.closeShareClients() }

// Name implements Collector.
func (c *Collector) Name() string { return "kafka" }

// Target implements Collector.
func (c *Collector) Target() string { return c.cluster }

// Describe implements Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- kafkaLagMessagesDesc
	ch <- kafkaLagSecondsDesc
	ch <- kafkaDeadlineDesc
	ch <- kafkaMembersDesc
	ch <- kafkaLostDesc
	ch <- kafkaGroupInfoDesc
	ch <- kafkaUncommittedDesc
	if len(c.shares) > 0 {
		ch <- shareLagMessagesDesc
		ch <- shareLagSecondsDesc
		ch <- shareMembersDesc
		ch <- shareInfoDesc
	}
	if c.cfg.PerPartition {
		ch <- kafkaPartLagMessagesDesc
		ch <- kafkaPartLagSecondsDesc
	}
}

// Update implements Collector. It returns an error, and sends nothing,
// when the cluster cannot be reached; when only parts fail (a broker, a
// coordinator, a partition) it sends what it could work out and returns
// an error naming the parts that failed, including every sum that is a
// lower bound because some of its partitions are unknown.
func (c *Collector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	case <-ctx.Done():
		return fmt.Errorf("kafka %s: wait for the previous collection: %w", c.cluster, ctx.Err())
	}
	var partial []error
	selected, shareSel, err := c.listGroups(ctx, &partial)
	if err != nil {
		return err
	}
	if len(selected) == 0 && len(shareSel) == 0 {
		c.known = map[string]string{}
		c.cache.reset()
		c.series = newSeriesCache()
		return nil
	}
	if c.cache.probes.len() == 0 {
		// A cold cache will read records: open the fetch connections
		// while the groups are described.
		warmed := make(chan struct{})
		go func() { defer close(warmed); c.prober.Warm(ctx) }()
		defer func() { <-warmed }()
	}
	var states []*groupState
	if len(selected) > 0 {
		states = c.describe(ctx, selected, &partial)
	}
	shares := c.describeShares(ctx, shareSel, &partial)
	byGroup, topics := groupTopics(states, c.topics)
	topics = mergeTopics(topics, shareTopics(shares))
	v := c.readOffsets(ctx, topics, &partial)
	p := c.cache.plan(states, byGroup, v, c.rule, &partial)
	if len(p.wants) > 0 {
		probes, ok, err := c.prober.Read(ctx, v.meta, p.wants)
		if err != nil {
			partial = append(partial, err)
		}
		c.cache.fill(p, probes, ok)
	}
	c.readShareProbes(ctx, shares, v, &partial)
	c.series.begin()
	now := c.now()
	c.emit(ch, states, p, now, &partial)
	c.emitShares(ch, shares, now, &partial)
	c.series.end()
	c.cache.sweep()
	c.known = map[string]string{}
	for _, g := range states {
		if !g.gone {
			c.known[g.name] = g.typ
		}
	}
	c.logger.Debug("kafka lag collected", "cluster", c.cluster, "groups", len(states), "topics", len(topics),
		"records_read", len(p.wants), "cached", c.cache.probes.len(), "failures", len(partial))
	if len(partial) > 0 {
		return fmt.Errorf("kafka %s: partial results: %w", c.cluster, errors.Join(partial...))
	}
	return nil
}

// emit decides every planned partition and sends the series.
func (c *Collector) emit(ch chan<- prometheus.Metric, states []*groupState, p *lagPlan, now time.Time, partial *[]error) {
	for _, g := range states {
		if g.gone {
			continue
		}
		gs := c.series.group(g.name)
		ls := gs.deadline
		if !c.series.hinted(ls) {
			ls = c.series.labels(partial, kafkaDeadlineDesc, c.cluster, g.name)
			gs.deadline = ls
		}
		ls.send(ch, 0, kafkaDeadlineDesc, c.cfg.DeadlineFor(g.name).Seconds())
		if g.membersOK {
			ls.send(ch, 1, kafkaMembersDesc, float64(g.members))
			info := gs.info
			if gs.state != g.state || gs.typ != g.typ || !c.series.hinted(info) {
				info = c.series.labels(partial, kafkaGroupInfoDesc, c.cluster, g.name, g.state, g.typ)
				gs.info, gs.state, gs.typ = info, g.state, g.typ
			}
			info.send(ch, 0, kafkaGroupInfoDesc, 1)
		}
	}
	decided := make([]Partition, 0, 64)
	for i := range p.topics {
		tp := &p.topics[i]
		decided = decideTopic(tp, now, decided[:0])
		sum, lost, noCommit := Sum(decided), int64(0), 0
		for j := range tp.parts {
			lost += Lost(tp.parts[j].o)
			if tp.parts[j].noCommit {
				noCommit++
			}
		}
		g, t := tp.group.name, tp.topic
		ls := tp.hints.series
		if !c.series.hinted(ls) {
			ls = c.series.labels(partial, kafkaLagMessagesDesc, c.cluster, g, t)
			tp.hints.series = ls
		}
		ls.send(ch, 3, kafkaUncommittedDesc, float64(noCommit))
		if sum.MessagesOK || sum.SecondsOK {
			if sum.MessagesOK {
				ls.send(ch, 0, kafkaLagMessagesDesc, float64(sum.Messages))
				ls.send(ch, 1, kafkaLostDesc, float64(lost))
			}
			if sum.SecondsOK {
				ls.send(ch, 2, kafkaLagSecondsDesc, sum.Seconds)
			}
		}
		if sum.Partial {
			*partial = append(*partial, fmt.Errorf("lag of group %s on %s is a lower bound: %d of %d partitions unknown", g, t, sum.Unknown, len(decided)))
		}
		if !c.cfg.PerPartition {
			continue
		}
		for j, d := range decided {
			if tp.parts[j].ignored {
				continue
			}
			if !d.MessagesOK && !d.SecondsOK {
				continue
			}
			ls := c.series.labels(partial, kafkaPartLagMessagesDesc, c.cluster, g, t, strconv.Itoa(j))
			if d.MessagesOK {
				ls.send(ch, 0, kafkaPartLagMessagesDesc, float64(d.Messages))
			}
			if d.SecondsOK {
				ls.send(ch, 1, kafkaPartLagSecondsDesc, d.Seconds)
			}
		}
	}
}

// decideTopic decides each partition of tp into buf.
func decideTopic(tp *topicPlan, now time.Time, buf []Partition) []Partition {
	for i := range tp.parts {
		pp := &tp.parts[i]
		switch {
		case pp.ignored:
			// Never committed, not counted: caught up for the sums.
			buf = append(buf, Partition{MessagesOK: true, SecondsOK: true})
		case !pp.ok:
			buf = append(buf, Partition{})
		case pp.behind && pp.probe != nil:
			buf = append(buf, decideCached(pp.o, pp.lagKind, pp.lagMs, now))
		default:
			buf = append(buf, Decide(pp.o, nil, now))
		}
	}
	return buf
}
