package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-exporter/outbox_exporter/collectors"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
)

var (
	kafkaLagMessagesDesc = prometheus.NewDesc(
		collectors.Namespace+"_consumer_lag_messages",
		"Records the consumer group has still to consume on the topic: high watermark minus committed offset, summed over partitions (a partition without a commit counts from the log start).",
		[]string{"cluster", "group", "topic"}, nil)
	kafkaLagSecondsDesc = prometheus.NewDesc(
		collectors.Namespace+"_consumer_lag_seconds",
		"Age of the oldest record on the topic the consumer group has not consumed (now minus the timestamp of the record at the committed offset, largest over partitions); 0 when caught up.",
		[]string{"cluster", "group", "topic"}, nil)
	kafkaDeadlineDesc = prometheus.NewDesc(
		collectors.Namespace+"_consumer_deadline_seconds",
		"Configured lag deadline of the consumer group: an event not consumed within it is late.",
		[]string{"cluster", "group"}, nil)
	kafkaMembersDesc = prometheus.NewDesc(
		collectors.Namespace+"_consumer_group_members",
		"Members of the consumer group; 0 when nobody consumes.",
		[]string{"cluster", "group"}, nil)
)

// Collector collects the lag of the configured consumer groups of one cluster:
// in records and in the age of the oldest unconsumed record. A scrape
// costs ListGroups, one describe per group type, one OffsetFetch per
// coordinator, one Metadata and the start and end offsets; the records at
// committed offsets are read only when a commit moved, in one Fetch per
// leader broker.
type Collector struct {
	cluster string
	cfg     *config.Kafka
	groups  []Matcher
	topics  func(string) bool
	logger  *slog.Logger

	cl     *kgo.Client
	adm    *kadm.Client
	prober *Prober
	now    func() time.Time

	// sem lets one Update run at a time: a late Update still running
	// after its scrape timed out holds the probe cache.
	sem chan struct{}
	// probes caches what was read at (topic, partition, offset), so a
	// commit that did not move costs no Fetch. Only entries used by the
	// last collection are kept. Topics are interned to small numbers so
	// that a lookup hashes no string.
	probes   map[probeKey]*cachedProbe
	topicIDs map[string]int32
	gen      uint64
	// known is the groups selected by the last collection, by type: when
	// listing fails on some brokers, their groups are still looked up.
	known map[string]string
}

// NewCollector returns the lag collector of cluster k. It does not connect
// until the first Update.
func NewCollector(cluster string, k *config.Kafka, logger *slog.Logger) (*Collector, error) {
	c := &Collector{
		cluster:  cluster,
		cfg:      k,
		logger:   logger,
		now:      time.Now,
		sem:      make(chan struct{}, 1),
		probes:   map[probeKey]*cachedProbe{},
		topicIDs: map[string]int32{},
		known:    map[string]string{},
	}
	for _, g := range k.Groups {
		p, err := config.ParsePattern(g)
		if err != nil {
			return nil, fmt.Errorf("kafka %s: group %q: %w", cluster, g, err)
		}
		c.groups = append(c.groups, p)
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
func (c *Collector) Close() { c.cl.Close() }

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
}

// probeKey identifies a cached probe: an interned topic, a partition and
// the offset read from.
type probeKey struct {
	topic int32
	part  int32
	from  int64
}

// cachedProbe is a cache entry; gen is the last collection that used it.
type cachedProbe struct {
	probe Probe
	gen   uint64
}

func (c *Collector) topicID(t string) int32 {
	id, ok := c.topicIDs[t]
	if !ok {
		id = int32(len(c.topicIDs))
		c.topicIDs[t] = id
	}
	return id
}

// groupState is what one collection learned of one group.
type groupState struct {
	name, typ  string
	members    int
	membersOK  bool
	assigned   []string
	subscribed []string
	commits    map[string]map[int32]kadm.OffsetResponse
	commitsOK  bool
	gone       bool
}

// Update implements Collector. It returns an error, and sends nothing,
// when the cluster cannot be reached; when only parts fail (a broker, a
// coordinator, a partition) it sends what it could work out and returns
// an error naming the parts that failed.
func (c *Collector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	case <-ctx.Done():
		return fmt.Errorf("kafka %s: wait for the previous collection: %w", c.cluster, ctx.Err())
	}
	var partial []error

	selected, err := c.listGroups(ctx, &partial)
	if err != nil {
		return err
	}
	if len(selected) == 0 {
		c.known = map[string]string{}
		c.probes = map[probeKey]*cachedProbe{}
		return nil
	}

	if len(c.probes) == 0 {
		// A cold cache will read records: open the fetch connections
		// while the groups are described.
		warmed := make(chan struct{})
		go func() { defer close(warmed); c.prober.Warm(ctx) }()
		defer func() { <-warmed }()
	}
	states := c.describe(ctx, selected, &partial)

	// Topics of interest, their partitions and leaders.
	groupTopics := map[string][]string{}
	topicSet := map[string]bool{}
	for _, g := range states {
		if g.gone || !g.commitsOK {
			continue
		}
		committed := make([]string, 0, len(g.commits))
		for t := range g.commits {
			committed = append(committed, t)
		}
		ts := Topics(committed, g.assigned, g.subscribed, c.topics)
		groupTopics[g.name] = ts
		for _, t := range ts {
			topicSet[t] = true
		}
	}
	topics := make([]string, 0, len(topicSet))
	for t := range topicSet {
		topics = append(topics, t)
	}
	sort.Strings(topics)

	var meta kadm.TopicDetails
	if len(topics) > 0 {
		m, err := c.adm.Metadata(ctx, topics...)
		if err != nil {
			// No lag without partitions; members and deadlines still go.
			partial = append(partial, fmt.Errorf("metadata of %d topics: %w", len(topics), err))
		}
		meta = m.Topics
	}

	// Which partitions need their log start: those some group has no
	// commit on.
	needStart := map[string]bool{}
	for _, g := range states {
		for _, t := range groupTopics[g.name] {
			td, ok := meta[t]
			if !ok || td.Err != nil {
				continue
			}
			if needStart[t] {
				continue
			}
			tc := g.commits[t]
			if len(tc) >= len(td.Partitions) {
				continue // a commit on every partition (the usual case)
			}
			for p := range td.Partitions {
				if _, ok := tc[p]; !ok {
					needStart[t] = true
					break
				}
			}
		}
	}
	ends, starts := c.listOffsets(ctx, meta, needStart, &partial)

	// Offsets per (group, topic, partition), and the records to read.
	type partPlan struct {
		o      Offsets
		ok     bool
		behind bool
		probe  *cachedProbe
	}
	type topicPlan struct {
		group *groupState
		topic string
		parts []partPlan
	}
	// miss is a partition whose probe is not cached: read as wants[want],
	// then cached under key (continuing cont when it is a continuation).
	type miss struct {
		pp   *partPlan
		key  probeKey
		want int
		cont *cachedProbe
	}
	c.gen++
	var (
		plans   = make([]topicPlan, 0, len(states))
		misses  []miss
		wants   []Want
		wantIdx = map[probeKey]int{}
	)
	cold := len(c.probes) == 0
	if cold {
		// The first collection misses everywhere: size for it.
		n := 0
		for _, g := range states {
			for _, t := range groupTopics[g.name] {
				n += len(ends[t])
			}
		}
		misses = make([]miss, 0, n)
		wantIdx = make(map[probeKey]int, n)
		c.probes = make(map[probeKey]*cachedProbe, n)
	}
	for _, g := range states {
		for _, t := range groupTopics[g.name] {
			td, ok := meta[t]
			if !ok || td.Err != nil {
				if ok && !errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
					partial = append(partial, fmt.Errorf("metadata of topic %s: %w", t, td.Err))
				}
				continue
			}
			plans = append(plans, topicPlan{group: g, topic: t, parts: make([]partPlan, len(ends[t]))})
			tp := &plans[len(plans)-1]
			tid := c.topicID(t)
			tends, tstarts, tcommits := ends[t], starts[t], g.commits[t]
			for i := range tp.parts {
				pp := &tp.parts[i]
				p := int32(i)
				if i >= len(tends) || tends[i] < 0 {
					continue
				}
				end := tends[i]
				o := Offsets{Commit: NoCommit, End: end}
				if i < len(tstarts) && tstarts[i] >= 0 {
					o.Start, o.StartKnown = tstarts[i], true
				}
				if cr, ok := tcommits[p]; ok {
					if cr.Err != nil {
						partial = append(partial, fmt.Errorf("committed offset of group %s on %s/%d: %w", g.name, t, p, cr.Err))
						continue
					}
					o.Commit = max(cr.At, NoCommit)
				}
				if !o.Committed() && !o.StartKnown {
					continue
				}
				from, behind := Oldest(o)
				pp.o, pp.ok, pp.behind = o, true, behind
				if !behind {
					continue
				}
				key := probeKey{tid, p, from}
				read := from
				cp := c.probes[key]
				switch {
				case cp != nil && cp.probe.Usable(end):
					cp.gen = c.gen
					pp.probe = cp
					continue
				case cp != nil:
					// Records were appended after a stretch of markers:
					// read on from where the last read stopped.
					read = cp.probe.Next
				}
				wk := probeKey{tid, p, read}
				wi, ok := wantIdx[wk]
				if !ok {
					wi = len(wants)
					wantIdx[wk] = wi
					wants = append(wants, Want{Topic: t, Partition: p, From: read})
				}
				misses = append(misses, miss{pp: pp, key: key, want: wi, cont: cp})
			}
		}
	}
	if len(wants) > 0 {
		probes, ok, err := c.prober.Read(ctx, meta, wants)
		if err != nil {
			partial = append(partial, err)
		}
		// A cold cache takes its entries from one slab. Later misses
		// are few and allocated one by one, so that a long-lived entry
		// does not keep a whole later slab alive.
		var slab []cachedProbe
		if cold {
			slab = make([]cachedProbe, len(misses))
		}
		for i, m := range misses {
			if !ok[m.want] {
				continue
			}
			pr := probes[m.want]
			if m.cont != nil {
				pr = m.cont.probe.Continue(pr)
			}
			cp := c.probes[m.key]
			if cp == nil || cp == m.cont {
				if cold {
					cp = &slab[i]
				} else {
					cp = new(cachedProbe)
				}
				c.probes[m.key] = cp
			}
			cp.probe, cp.gen = pr, c.gen
			m.pp.probe = cp
		}
	}
	now := c.now()

	// Decide and send.
	for _, g := range states {
		if g.gone {
			continue
		}
		send(ch, &partial, kafkaDeadlineDesc, c.cfg.DeadlineFor(g.name).Seconds(), c.cluster, g.name)
		if g.membersOK {
			send(ch, &partial, kafkaMembersDesc, float64(g.members), c.cluster, g.name)
		}
	}
	decided := make([]Partition, 0, 64)
	for _, tp := range plans {
		decided = decided[:0]
		for i := range tp.parts {
			pp := &tp.parts[i]
			if !pp.ok {
				decided = append(decided, Partition{})
				continue
			}
			var probe *Probe
			if pp.behind && pp.probe != nil {
				probe = &pp.probe.probe
			}
			decided = append(decided, Decide(pp.o, probe, now))
		}
		sum := Sum(decided)
		if sum.MessagesOK {
			send(ch, &partial, kafkaLagMessagesDesc, float64(sum.Messages), c.cluster, tp.group.name, tp.topic)
		}
		if sum.SecondsOK {
			send(ch, &partial, kafkaLagSecondsDesc, sum.Seconds, c.cluster, tp.group.name, tp.topic)
		}
	}

	// Keep only what this collection used: moved commits' entries go.
	for k, cp := range c.probes {
		if cp.gen != c.gen {
			delete(c.probes, k)
		}
	}
	if len(c.probes) == 0 && len(c.topicIDs) > 0 {
		c.topicIDs = map[string]int32{}
	}
	c.known = map[string]string{}
	for _, g := range states {
		if !g.gone {
			c.known[g.name] = g.typ
		}
	}
	c.logger.Debug("kafka lag collected", "cluster", c.cluster, "groups", len(states), "topics", len(topics),
		"records_read", len(wants), "cached", len(c.probes), "failures", len(partial))
	if len(partial) > 0 {
		return fmt.Errorf("kafka %s: partial results: %w", c.cluster, errors.Join(partial...))
	}
	return nil
}

// send sends one gauge. A group name that is not valid UTF-8 cannot be a
// label value: that series is left out and reported, instead of the
// panic of MustNewConstMetric taking the exporter down.
func send(ch chan<- prometheus.Metric, partial *[]error, desc *prometheus.Desc, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	if err != nil {
		*partial = append(*partial, fmt.Errorf("series %q: %w", labels, err))
		return
	}
	ch <- m
}

// listGroups lists the cluster's groups with their types and selects the
// configured ones. A listing that fails on every broker is an error; one
// that fails on some adds the groups the last collection knew, so that a
// down coordinator does not look like deleted groups.
func (c *Collector) listGroups(ctx context.Context, partial *[]error) ([]Listed, error) {
	if len(c.groups) == 0 {
		return nil, nil
	}
	listed, err := c.adm.ListGroups(ctx)
	var se *kadm.ShardErrors
	partialList := false
	switch {
	case err == nil:
	case errors.As(err, &se) && !se.AllFailed:
		partialList = true
		*partial = append(*partial, fmt.Errorf("list groups: %w", err))
	default:
		return nil, fmt.Errorf("kafka %s: list groups: %w", c.cluster, err)
	}
	all := make([]Listed, 0, len(listed))
	for _, g := range listed {
		all = append(all, Listed{Name: g.Group, Type: g.GroupType})
	}
	if partialList {
		for name, typ := range c.known {
			if _, ok := listed[name]; !ok {
				all = append(all, Listed{Name: name, Type: typ})
			}
		}
	}
	return SelectGroups(all, c.groups), nil
}

// describe reads the members and commits of the selected groups: classic
// groups with DescribeGroups, KIP-848 consumer groups with
// DescribeConsumerGroups (DescribeGroups does not describe them: Collector 4.x
// answers GROUP_ID_NOT_FOUND, kfake an empty member list), and the
// commits of all in one OffsetFetch per coordinator. The three run at once.
func (c *Collector) describe(ctx context.Context, selected []Listed, partial *[]error) []*groupState {
	var classic, consumer, all []string
	states := make([]*groupState, 0, len(selected))
	byName := map[string]*groupState{}
	for _, g := range selected {
		s := &groupState{name: g.Name, typ: g.Type}
		states = append(states, s)
		byName[g.Name] = s
		all = append(all, g.Name)
		if g.Type == TypeConsumer {
			consumer = append(consumer, g.Name)
		} else {
			classic = append(classic, g.Name)
		}
	}
	var (
		wg        sync.WaitGroup
		described kadm.DescribedGroups
		descErr   error
		next      kadm.DescribedConsumerGroups
		nextErr   error
		fetched   kadm.FetchOffsetsResponses
	)
	if len(classic) > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); described, descErr = c.adm.DescribeGroups(ctx, classic...) }()
	}
	if len(consumer) > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); next, nextErr = c.adm.DescribeConsumerGroups(ctx, consumer...) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); fetched = c.adm.FetchManyOffsets(ctx, all...) }()
	wg.Wait()

	if descErr != nil {
		*partial = append(*partial, fmt.Errorf("describe groups: %w", descErr))
	}
	if nextErr != nil {
		*partial = append(*partial, fmt.Errorf("describe consumer groups: %w", nextErr))
	}
	for name, d := range described {
		s := byName[name]
		if s == nil {
			continue
		}
		switch {
		case errors.Is(d.Err, kerr.GroupIDNotFound) || d.State == "Dead":
			s.gone = true
		case d.Err != nil:
			*partial = append(*partial, fmt.Errorf("describe group %s: %w", name, d.Err))
		default:
			s.members, s.membersOK = len(d.Members), true
			for _, m := range d.Members {
				if a, ok := m.Assigned.AsConsumer(); ok {
					for _, t := range a.Topics {
						s.assigned = append(s.assigned, t.Topic)
					}
				}
				if j, ok := m.Join.AsConsumer(); ok {
					s.subscribed = append(s.subscribed, j.Topics...)
				}
			}
		}
	}
	for name, d := range next {
		s := byName[name]
		if s == nil {
			continue
		}
		switch {
		case errors.Is(d.Err, kerr.GroupIDNotFound) || d.State == "Dead":
			s.gone = true
		case d.Err != nil:
			*partial = append(*partial, fmt.Errorf("describe consumer group %s: %w", name, d.Err))
		default:
			s.members, s.membersOK = len(d.Members), true
			for _, m := range d.Members {
				for t := range m.Assignment {
					// An assignment named only by topic ID has no name
					// here; its partitions count through the commits.
					if t != "" {
						s.assigned = append(s.assigned, t)
					}
				}
				s.subscribed = append(s.subscribed, m.SubscribedTopics...)
			}
		}
	}
	for name, r := range fetched {
		s := byName[name]
		if s == nil {
			continue
		}
		switch {
		case errors.Is(r.Err, kerr.GroupIDNotFound):
			s.gone = true
		case r.Err != nil:
			*partial = append(*partial, fmt.Errorf("committed offsets of group %s: %w", name, r.Err))
		default:
			s.commits, s.commitsOK = r.Fetched, true
		}
	}
	return states
}

func unknownOffsets(n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = -1
	}
	return s
}

// listOffsets lists the high watermark of every partition of meta's
// topics, and the log start of the topics in needStart, the two at once.
// The offsets of a topic are indexed by partition; a partition that could
// not be listed has -1.
func (c *Collector) listOffsets(ctx context.Context, meta kadm.TopicDetails, needStart map[string]bool, partial *[]error) (ends, starts map[string][]int64) {
	build := func(ts int64, keep func(string) bool) *kmsg.ListOffsetsRequest {
		req := kmsg.NewPtrListOffsetsRequest()
		for t, td := range meta {
			if td.Err != nil || !keep(t) {
				continue
			}
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = t
			for p := range td.Partitions {
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Partition = p
				rp.Timestamp = ts
				rp.CurrentLeaderEpoch = -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
		}
		return req
	}
	run := func(what string, req *kmsg.ListOffsetsRequest, dst map[string][]int64, mu *sync.Mutex) {
		if len(req.Topics) == 0 {
			return
		}
		for _, shard := range c.cl.RequestSharded(ctx, req) {
			mu.Lock()
			if shard.Err != nil {
				*partial = append(*partial, fmt.Errorf("list %s offsets on broker %d: %w", what, shard.Meta.NodeID, shard.Err))
				mu.Unlock()
				continue
			}
			for _, t := range shard.Resp.(*kmsg.ListOffsetsResponse).Topics {
				for _, p := range t.Partitions {
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
						*partial = append(*partial, fmt.Errorf("list %s offset of %s/%d: %w", what, t.Topic, p.Partition, err))
						continue
					}
					if ps := dst[t.Topic]; p.Partition >= 0 && int(p.Partition) < len(ps) {
						ps[p.Partition] = p.Offset
					}
				}
			}
			mu.Unlock()
		}
	}
	// Allocated up front: the shards only fill in slots.
	ends, starts = map[string][]int64{}, map[string][]int64{}
	for t, td := range meta {
		if td.Err != nil {
			continue
		}
		n := int32(0)
		for p := range td.Partitions {
			n = max(n, p+1)
		}
		ends[t] = unknownOffsets(int(n))
		if needStart[t] {
			starts[t] = unknownOffsets(int(n))
		}
	}
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	wg.Add(2)
	go func() { defer wg.Done(); run("end", build(-1, func(string) bool { return true }), ends, &mu) }()
	go func() {
		defer wg.Done()
		run("start", build(-2, func(t string) bool { return needStart[t] }), starts, &mu)
	}()
	wg.Wait()
	return ends, starts
}
