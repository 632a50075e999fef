package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
)

// Apache Kafka 4.4 computes a share group's lag itself when asked for its
// offsets: the group coordinator reads the share-partition state from the
// share coordinator, then the partitions' end offsets with a ListOffsets
// request to their leader, one request per group, on a broker-internal
// client that sends one request per connection at a time. That client
// stamps its requests with a monotonic clock while its send thread ages
// them with the wall clock, so every request that waits behind another is
// "timed out" at once and asked again after a backoff of about 2 s, then
// 4, 8, 16 s (no broker setting changes either). Groups asked together
// therefore wait seconds (20 groups in one request: 2.5 s; requests of
// 200 groups on 16 connections at 10,000 share groups: 15-20 s each),
// while groups asked one at a time meet nothing in that queue: 1,000
// groups one a request on 2-4 connections took 4.3-4.5 s, 10,000 groups
// 12.5-20 s.
//
// Where the share coordinator's log can be read (sharelog.go), none of
// this is asked: only the describes. Otherwise the offsets are asked on a
// few connections, each asking its next
// groups when the last are answered (clients kept for them, which also
// keeps the consumer groups' requests from queueing behind them), each
// request with a time limit inside the scrape's; a request that fails or
// is late costs only its groups. How many groups a request names is
// chosen per cluster from the broker's answers (sharebatch.go): one on
// Apache Kafka 4.4, up to chunk where batches answer as fast. The share
// describes are quick and go 200 groups a request on the collector's
// client.
type shareLimits struct {
	// chunk is the most groups one offsets request names.
	chunk int
	// fixed makes every offsets request name chunk groups, whatever
	// the broker's answers.
	fixed bool
	// descChunk is how many groups one describe names; 0: chunk.
	descChunk int
	// conns is how many connections at most ask for offsets at once.
	conns int
	// timeout bounds one request.
	timeout time.Duration
}

var defaultShareLimits = shareLimits{chunk: 200, descChunk: 200, conns: 4, timeout: 20 * time.Second}

// shareReserve is the part of the scrape's remaining time the share
// describes leave to the reads that follow them (offsets, records).
const shareReserve = 4

// shareAnswers is what askShares learned: each answered group's
// description and offsets, how many groups were left without one of the
// two (missed, for the first failure err), and errors of single groups.
type shareAnswers struct {
	desc   kadm.DescribedShareGroups
	offs   map[string]*kmsg.DescribeShareGroupOffsetsResponseGroup
	missed int
	err    error
	errs   []error
	miss   map[string]bool
}

func (a *shareAnswers) fail(part []string, err error) {
	if a.err == nil {
		a.err = err
	}
	for _, g := range part {
		a.miss[g] = true
	}
}

// askShares sends DescribeShareGroups and DescribeShareGroupOffsets for
// groups, the describes descChunk groups a request, the offsets on conns
// connections at once, as many groups a request as the queue gives.
func (c *Collector) askShares(ctx context.Context, groups []string) shareAnswers {
	lim := c.shareLimits()
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-time.Until(dl)/shareReserve))
		defer cancel()
	}
	groups = c.sharesFromLast(groups)
	a := shareAnswers{desc: kadm.DescribedShareGroups{}, offs: make(map[string]*kmsg.DescribeShareGroupOffsetsResponseGroup, len(groups)), miss: map[string]bool{}}
	defer c.keepShareFrom(groups, &a)
	conns := min(lim.conns, len(groups))
	// The first client asks the trials alone: a trial given up at its
	// time limit leaves its answer pending on that connection only.
	cls, err := c.shareClients(lim, conns+1)
	if err != nil {
		a.fail(groups, err)
		a.missed = len(groups)
		return a
	}
	c.shareCoord.keepOnly(groups)
	q := c.shareQueue(lim, groups)
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		reqs int
	)
	start := time.Now()
	defer func() {
		if q.b != nil {
			size, trials, failed := q.b.stats()
			c.logger.Debug("kafka share group offsets asked", "cluster", c.cluster, "groups", len(groups),
				"requests", reqs, "size", size, "trials", trials, "failed_trials", failed, "took", time.Since(start))
		}
	}()
	for i := 1; i <= conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				part, trial, limit := q.take()
				if part == nil {
					return
				}
				cl, timeout := cls[i], lim.timeout
				if trial {
					cl, timeout = cls[0], min(limit, timeout)
				}
				rctx, cancel := context.WithTimeout(ctx, timeout)
				start := time.Now()
				got, err := c.askShareOffsets(rctx, cl, part)
				took := time.Since(start)
				cancel()
				if q.done(part, trial, took, answeredAll(part, got)) {
					mu.Lock()
					reqs++
					mu.Unlock()
					continue
				}
				mu.Lock()
				reqs++
				a.keepOffsets(part, got, err)
				mu.Unlock()
			}
		}()
	}
	c.startShareDescribes(ctx, lim, groups, &a, &mu, &wg)
	wg.Wait()
	a.missed = len(a.miss)
	return a
}

// askShareDescribes sends only the DescribeShareGroups of groups, when
// their offsets come from the share coordinator's log (sharelog.go).
func (c *Collector) askShareDescribes(ctx context.Context, groups []string) shareAnswers {
	a := shareAnswers{desc: kadm.DescribedShareGroups{}, miss: map[string]bool{}}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	c.startShareDescribes(ctx, c.shareLimits(), groups, &a, &mu, &wg)
	wg.Wait()
	a.missed = len(a.miss)
	return a
}

// startShareDescribes starts the DescribeShareGroups of groups, descChunk
// groups a request, each request in a goroutine of wg keeping its answer
// in a under mu.
func (c *Collector) startShareDescribes(ctx context.Context, lim shareLimits, groups []string, a *shareAnswers, mu *sync.Mutex, wg *sync.WaitGroup) {
	dc := lim.descChunk
	if dc <= 0 {
		dc = lim.chunk
	}
	for i := 0; i < len(groups); i += dc {
		part := groups[i:min(i+dc, len(groups))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, lim.timeout)
			got, err := c.adm.DescribeShareGroups(rctx, part...)
			cancel()
			mu.Lock()
			a.keepDescribed(part, got, err)
			mu.Unlock()
		}()
	}
}

// shareQueue returns the queue of one collection's offsets requests:
// fixed chunks when the limits say so, else sizes from the cluster's
// batcher, made on first use and kept.
func (c *Collector) shareQueue(lim shareLimits, groups []string) *shareQueue {
	q := &shareQueue{groups: groups, chunk: max(lim.chunk, 1)}
	if lim.fixed {
		return q
	}
	c.shareMu.Lock()
	if c.shareBatch == nil || c.shareBatch.most != q.chunk {
		c.shareBatch = newShareBatcher(q.chunk)
	}
	q.b = c.shareBatch
	c.shareMu.Unlock()
	q.b.begin()
	return q
}

// answeredAll reports whether got names every group of part.
func answeredAll(part []string, got map[string]*kmsg.DescribeShareGroupOffsetsResponseGroup) bool {
	for _, g := range part {
		if _, ok := got[g]; !ok {
			return false
		}
	}
	return true
}

// sharesFromLast returns groups (in their order) starting at the first
// group the last collection left unanswered, so that when a scrape's
// time does not reach every group, the next one asks first the groups
// this one missed: every group has fresh series at least every few
// scrapes, not a fixed tail never.
func (c *Collector) sharesFromLast(groups []string) []string {
	c.shareMu.Lock()
	from := c.shareFrom
	c.shareMu.Unlock()
	i := slices.Index(groups, from)
	if from == "" || i <= 0 {
		return groups
	}
	return append(slices.Clone(groups[i:]), groups[:i]...)
}

// keepShareFrom keeps the first group of groups (in the order asked) that
// a is missing, or none.
func (c *Collector) keepShareFrom(groups []string, a *shareAnswers) {
	from := ""
	if a.missed > 0 {
		for _, g := range groups {
			if a.miss[g] {
				from = g
				break
			}
		}
	}
	c.shareMu.Lock()
	c.shareFrom = from
	c.shareMu.Unlock()
}

// shareLimits is the collector's limits, the defaults unless a test set
// them.
func (c *Collector) shareLimits() shareLimits {
	if c.shareLim.chunk <= 0 {
		return defaultShareLimits
	}
	return c.shareLim
}

// shareClients returns n clients that ask for share-group offsets, made
// on first use and kept: their read timeout is a request's limit.
func (c *Collector) shareClients(lim shareLimits, n int) ([]*kgo.Client, error) {
	c.shareMu.Lock()
	defer c.shareMu.Unlock()
	for len(c.shareCls) < n {
		cl, err := kafkaclient.New(c.cfg, kgo.RequestTimeoutOverhead(lim.timeout), kgo.ConnIdleTimeout(3*time.Minute))
		if err != nil {
			return nil, fmt.Errorf("share group offsets client: %w", err)
		}
		c.shareCls = append(c.shareCls, cl)
	}
	return c.shareCls[:n], nil
}

// closeShareClients closes the clients of shareClients.
func (c *Collector) closeShareClients() {
	c.shareMu.Lock()
	defer c.shareMu.Unlock()
	for _, cl := range c.shareCls {
		cl.Close()
	}
	c.shareCls = nil
}

// keepDescribed keeps the groups of one chunk's describe answer; those it
// lacks are missed.
func (a *shareAnswers) keepDescribed(part []string, got kadm.DescribedShareGroups, err error) {
	var left []string
	for _, g := range part {
		if d, ok := got[g]; ok {
			a.desc[g] = d
		} else {
			left = append(left, g)
		}
	}
	if len(left) > 0 {
		a.fail(left, fmt.Errorf("describe share groups: %w", orUnanswered(err)))
	}
}

// keepOffsets keeps the groups of one chunk's offsets answer; those it
// lacks are missed. A group's authorization error is its own.
func (a *shareAnswers) keepOffsets(part []string, got map[string]*kmsg.DescribeShareGroupOffsetsResponseGroup, err error) {
	var left []string
	for _, g := range part {
		if rg, ok := got[g]; ok {
			a.offs[g] = rg
		} else {
			left = append(left, g)
		}
	}
	if len(left) == 0 {
		if err != nil {
			a.errs = append(a.errs, fmt.Errorf("share group offsets: %w", err))
		}
		return
	}
	a.fail(left, fmt.Errorf("share group offsets: %w", orUnanswered(err)))
}

var errUnanswered = errors.New("the broker's answer did not name the group")

func orUnanswered(err error) error {
	if err != nil {
		return err
	}
	return errUnanswered
}

// fetchShareOffsets reads the share-partition offsets of groups: one
// DescribeShareGroupOffsets naming them all, which the client splits by
// coordinator, as kadm.DescribeShareGroupOffsets does, but kept as the
// answer's own slices: kadm's map per (group, topic), read again into
// sorted slices, was a third of a steady share-group scrape's collection
// CPU. A shard that fails leaves its groups out and is reported once; an
// authorization error is kadm's AuthError.
func fetchShareOffsets(ctx context.Context, cl *kgo.Client, groups []string, coords *shareCoords) (map[string]*kmsg.DescribeShareGroupOffsetsResponseGroup, error) {
	out := make(map[string]*kmsg.DescribeShareGroupOffsetsResponseGroup, len(groups))
	if len(groups) == 0 {
		return out, nil
	}
	var errs []error
	for _, shard := range cl.RequestSharded(ctx, shareOffsetsRequest(groups)) {
		if shard.Err != nil {
			errs = append(errs, fmt.Errorf("%d groups: %w", len(shard.Req.(*kmsg.DescribeShareGroupOffsetsRequest).Groups), shard.Err))
			continue
		}
		resp := shard.Resp.(*kmsg.DescribeShareGroupOffsetsResponse)
		for i := range resp.Groups {
			rg := &resp.Groups[i]
			if err := authErr(rg.ErrorCode); err != nil {
				errs = append(errs, fmt.Errorf("group %s: %w", rg.GroupID, err))
				continue
			}
			out[rg.GroupID] = rg
			if rg.ErrorCode == 0 {
				coords.learn(rg.GroupID, shard.Meta.NodeID)
			}
		}
	}
	return out, errors.Join(errs...)
}

// shareParts turns one group's share offsets into partitions by topic,
// kept by filter, sorted by partition. Each partition goes to its own
// index, so they come out sorted without a sort; the indexes left empty
// are then squeezed out. The group's topics share one allocation, and an
// error code is looked up only when it is not 0 (the lookup, a map's,
// was a third of this function's time at 10,000 groups).
func shareParts(rg *kmsg.DescribeShareGroupOffsetsResponseGroup, filter func(string) bool, partial *[]error) map[string][]sharePart {
	if rg.ErrorCode != 0 {
		err := kerr.ErrorForCode(rg.ErrorCode)
		if !errors.Is(err, kerr.GroupIDNotFound) {
			*partial = append(*partial, fmt.Errorf("share group offsets of %s: %w", rg.GroupID, err))
		}
		return nil
	}
	total := 0
	for _, rt := range rg.Topics {
		if filter == nil || filter(rt.Topic) {
			total += int(sharePartsSpan(rt.Partitions))
		}
	}
	slab := make([]sharePart, total)
	out := make(map[string][]sharePart, len(rg.Topics))
	for _, rt := range rg.Topics {
		if filter != nil && !filter(rt.Topic) {
			continue
		}
		n := sharePartsSpan(rt.Partitions)
		parts := slab[:n:n]
		slab = slab[n:]
		for _, rp := range rt.Partitions {
			p := rp.Partition
			if p < 0 {
				continue
			}
			if rp.ErrorCode != 0 {
				*partial = append(*partial, fmt.Errorf("share group offset of %s on %s/%d: %w", rg.GroupID, rt.Topic, p, kerr.ErrorForCode(rp.ErrorCode)))
				parts[p] = sharePart{part: p, listed: true}
				continue
			}
			if rp.StartOffset < 0 {
				// No share-partition state yet (the group has not
				// fetched from it): Kafka's tool shows "-", and there
				// is nothing to count.
				continue
			}
			parts[p] = sharePart{part: p, spso: rp.StartOffset, lag: rp.Lag, lagOK: rp.Lag >= 0, listed: true}
		}
		kept := parts[:0]
		for _, sp := range parts {
			if sp.listed {
				sp.listed = false
				kept = append(kept, sp)
			}
		}
		out[rt.Topic] = kept
	}
	return out
}

// sharePartsSpan is one past the highest partition of ps.
func sharePartsSpan(ps []kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition) int32 {
	n := int32(0)
	for _, rp := range ps {
		n = max(n, rp.Partition+1)
	}
	return n
}
