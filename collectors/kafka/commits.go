package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// committed is one partition's committed offset as OffsetFetch answered it,
// and the partition's error code; ok: the partition was in the answer. It
// holds no pointer (an error value was 16 bytes more and made every
// group's slice one the garbage collector scans), so a steady scrape's
// 24,000 of them at 1000 groups cost the collector no marking.
type committed struct {
	at   int64
	code int16
	ok   bool
}

// err is the partition's error, nil for none (without kerr's map lookup:
// it is asked for every partition of every group).
func (c committed) err() error {
	if c.code == 0 {
		return nil
	}
	return kerr.ErrorForCode(c.code)
}

// fetchedGroup is one group's OffsetFetch answer: its commits by topic,
// each indexed by partition.
type fetchedGroup struct {
	commits map[string][]committed
	err     error
}

// fetchCommits reads the committed offsets of groups: one OffsetFetch
// naming them all, which the client splits by coordinator (and by group
// for brokers before multi-group OffsetFetch), as kadm.FetchManyOffsets
// does. Each topic's commits are one slice indexed by partition, not a
// map grown one partition at a time: kadm's map per (group, topic) was
// 15% of a steady scrape's CPU at 1000 groups, mostly in map growth. A shard that fails fails
// its groups; an authorization error is kadm's AuthError, as in the rest
// of the collection.
func fetchCommits(ctx context.Context, cl *kgo.Client, groups []string) map[string]fetchedGroup {
	out := make(map[string]fetchedGroup, len(groups))
	if len(groups) == 0 {
		return out
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Groups = make([]kmsg.OffsetFetchRequestGroup, len(groups))
	for i, g := range groups {
		req.Groups[i] = kmsg.NewOffsetFetchRequestGroup()
		req.Groups[i].Group = g
	}
	for _, shard := range cl.RequestSharded(ctx, req) {
		sent := shard.Req.(*kmsg.OffsetFetchRequest)
		err := shard.Err
		var resp *kmsg.OffsetFetchResponse
		if err == nil {
			resp = shard.Resp.(*kmsg.OffsetFetchResponse)
			err = authErr(resp.ErrorCode)
		}
		if err != nil {
			for _, g := range sent.Groups {
				out[g.Group] = fetchedGroup{err: err}
			}
			continue
		}
		slab := make([]committed, commitsSize(resp))
		for i := range resp.Groups {
			g := &resp.Groups[i]
			if err := authErr(g.ErrorCode); err != nil {
				out[g.Group] = fetchedGroup{err: err}
				continue
			}
			var cs map[string][]committed
			cs, slab = groupCommits(g, slab)
			out[g.Group] = fetchedGroup{commits: cs, err: kerr.ErrorForCode(g.ErrorCode)}
		}
	}
	return out
}

// topicSize is how many partitions t's slice indexes: its largest
// partition plus one.
func topicSize(t *kmsg.OffsetFetchResponseGroupTopic) int {
	n := int32(0)
	for _, p := range t.Partitions {
		n = max(n, p.Partition+1)
	}
	return int(n)
}

// commitsSize is how many commits every group's topics of resp index
// together: one slab holds them all instead of a slice per (group, topic).
func commitsSize(resp *kmsg.OffsetFetchResponse) int {
	n := 0
	for i := range resp.Groups {
		for j := range resp.Groups[i].Topics {
			n += topicSize(&resp.Groups[i].Topics[j])
		}
	}
	return n
}

// groupCommits is one group's answer by topic, indexed by partition; each
// topic's slice is cut from slab while it lasts, and the rest of slab is
// returned.
func groupCommits(g *kmsg.OffsetFetchResponseGroup, slab []committed) (map[string][]committed, []committed) {
	rs := make(map[string][]committed, len(g.Topics))
	for i := range g.Topics {
		t := &g.Topics[i]
		n := topicSize(t)
		var cs []committed
		if n <= len(slab) {
			cs, slab = slab[:n:n], slab[n:]
		} else {
			cs = make([]committed, n)
		}
		for _, p := range t.Partitions {
			if p.Partition >= 0 {
				cs[p.Partition] = committed{at: p.Offset, code: p.ErrorCode, ok: true}
			}
		}
		rs[t.Topic] = cs
	}
	return rs, slab
}

// authErr is the error of an authorization failure code, as kadm
// reports it; other codes are the caller's to read.
func authErr(code int16) error {
	switch err := kerr.ErrorForCode(code); err {
	case kerr.ClusterAuthorizationFailed, kerr.TopicAuthorizationFailed, kerr.GroupAuthorizationFailed,
		kerr.TransactionalIDAuthorizationFailed, kerr.DelegationTokenAuthorizationFailed:
		return &kadm.AuthError{Err: err}
	}
	return nil
}
