package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fetchShareOffsets reads the share-partition offsets of groups: one
// DescribeShareGroupOffsets naming them all, which the client splits by
// coordinator, as kadm.DescribeShareGroupOffsets does, but kept as the
// answer's own slices: kadm's map per (group, topic), read again into
// sorted slices, was a third of a steady share-group scrape's collection
// CPU. A shard that fails leaves its groups out and is reported once; an
// authorization error is kadm's AuthError.
func fetchShareOffsets(ctx context.Context, cl *kgo.Client, groups []string) (map[string]*kmsg.DescribeShareGroupOffsetsResponseGroup, error) {
	out := make(map[string]*kmsg.DescribeShareGroupOffsetsResponseGroup, len(groups))
	if len(groups) == 0 {
		return out, nil
	}
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	req.Groups = make([]kmsg.DescribeShareGroupOffsetsRequestGroup, len(groups))
	for i, g := range groups {
		req.Groups[i] = kmsg.NewDescribeShareGroupOffsetsRequestGroup()
		req.Groups[i].GroupID = g
	}
	var errs []error
	for _, shard := range cl.RequestSharded(ctx, req) {
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
		}
	}
	return out, errors.Join(errs...)
}

// shareParts turns one group's share offsets into partitions by topic,
// kept by filter, sorted by partition. Each partition goes to its own
// index, so they come out sorted without a sort; the indexes left empty
// are then squeezed out.
func shareParts(rg *kmsg.DescribeShareGroupOffsetsResponseGroup, filter func(string) bool, partial *[]error) map[string][]sharePart {
	err := kerr.ErrorForCode(rg.ErrorCode)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil
	}
	if err != nil {
		*partial = append(*partial, fmt.Errorf("share group offsets of %s: %w", rg.GroupID, err))
		return nil
	}
	out := make(map[string][]sharePart, len(rg.Topics))
	for _, rt := range rg.Topics {
		if filter != nil && !filter(rt.Topic) {
			continue
		}
		n := int32(0)
		for _, rp := range rt.Partitions {
			n = max(n, rp.Partition+1)
		}
		parts := make([]sharePart, n)
		for _, rp := range rt.Partitions {
			p := rp.Partition
			if p < 0 {
				continue
			}
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				*partial = append(*partial, fmt.Errorf("share group offset of %s on %s/%d: %w", rg.GroupID, rt.Topic, p, err))
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
