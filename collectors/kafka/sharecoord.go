package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// shareCoords is each share group's coordinator, kept for the offsets
// requests. Asked through kgo's sharded requests only, each of the
// offsets clients kept its own cache of every group's coordinator, about
// 290 bytes a group and a client, five copies with the collector's (a
// fifth of the heap at 1,000 share groups), and every request went
// through kgo's sharding (a goroutine and the coordinator lookup). Now a
// group is asked through kgo until one answer tells which broker
// answered for it (so it is in one offsets client's cache, not all), and
// then straight to that broker; a group the broker says moved, or whose
// broker does not answer, is forgotten and asked again through kgo,
// which finds its coordinator anew. (Looking all the coordinators up
// first, in one FindCoordinator, made a first scrape of 1,000 share
// groups on Apache Kafka 4.4 take 8-17 s instead of 4-5.)
type shareCoords struct {
	mu   sync.Mutex
	node map[string]int32
}

// keepOnly drops, when the groups kept are many more than groups, those
// not in groups (gone).
func (sc *shareCoords) keepOnly(groups []string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.node != nil && len(sc.node) <= 2*len(groups)+64 {
		return
	}
	old := sc.node
	sc.node = make(map[string]int32, len(groups))
	for _, g := range groups {
		if n, ok := old[g]; ok {
			sc.node[g] = n
		}
	}
}

// learn keeps the node that answered for group through kgo: its
// coordinator.
func (sc *shareCoords) learn(group string, node int32) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.node == nil {
		sc.node = map[string]int32{}
	}
	sc.node[group] = node
}

// nodeOf returns the coordinator all of part's groups share, if known.
func (sc *shareCoords) nodeOf(part []string) (int32, bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	n, ok := sc.node[part[0]]
	for _, g := range part[1:] {
		if m, known := sc.node[g]; !ok || !known || m != n {
			return 0, false
		}
	}
	return n, ok
}

func (sc *shareCoords) forget(groups []string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for _, g := range groups {
		delete(sc.node, g)
	}
}

// askShareOffsets reads the share-partition offsets of part on cl: from
// their coordinator when known, else (and for the groups whose
// coordinator moved, or whose coordinator did not answer) through kgo's
// sharded request.
func (c *Collector) askShareOffsets(ctx context.Context, cl *kgo.Client, part []string) (map[string]*kmsg.DescribeShareGroupOffsetsResponseGroup, error) {
	node, ok := c.shareCoord.nodeOf(part)
	if !ok {
		return fetchShareOffsets(ctx, cl, part, &c.shareCoord)
	}
	out := make(map[string]*kmsg.DescribeShareGroupOffsetsResponseGroup, len(part))
	resp, err := cl.Broker(int(node)).Request(ctx, shareOffsetsRequest(part))
	if err != nil {
		// The broker may be gone: kgo finds the coordinators anew.
		c.shareCoord.forget(part)
		if ctx.Err() != nil {
			return out, fmt.Errorf("%d groups: %w", len(part), err)
		}
		return fetchShareOffsets(ctx, cl, part, &c.shareCoord)
	}
	var (
		moved []string
		errs  []error
	)
	for i, rg := range resp.(*kmsg.DescribeShareGroupOffsetsResponse).Groups {
		switch err := kerr.ErrorForCode(rg.ErrorCode); {
		case errors.Is(err, kerr.NotCoordinator), errors.Is(err, kerr.CoordinatorNotAvailable), errors.Is(err, kerr.CoordinatorLoadInProgress):
			moved = append(moved, rg.GroupID)
		case authErr(rg.ErrorCode) != nil:
			errs = append(errs, fmt.Errorf("group %s: %w", rg.GroupID, authErr(rg.ErrorCode)))
		default:
			out[rg.GroupID] = &resp.(*kmsg.DescribeShareGroupOffsetsResponse).Groups[i]
		}
	}
	if len(moved) > 0 {
		c.shareCoord.forget(moved)
		got, err := fetchShareOffsets(ctx, cl, moved, &c.shareCoord)
		for g, rg := range got {
			out[g] = rg
		}
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// shareOffsetsRequest is a DescribeShareGroupOffsets naming groups, every
// topic of each.
func shareOffsetsRequest(groups []string) *kmsg.DescribeShareGroupOffsetsRequest {
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	req.Groups = make([]kmsg.DescribeShareGroupOffsetsRequestGroup, len(groups))
	for i, g := range groups {
		req.Groups[i] = kmsg.NewDescribeShareGroupOffsetsRequestGroup()
		req.Groups[i].GroupID = g
	}
	return req
}
