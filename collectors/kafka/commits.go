package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// committed is one partition's committed offset as OffsetFetch answered it;
// ok: the partition was in the answer.
type committed struct {
	at  int64
	err error
	ok  bool
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
		for i := range resp.Groups {
			g := &resp.Groups[i]
			if err := authErr(g.ErrorCode); err != nil {
				out[g.Group] = fetchedGroup{err: err}
				continue
			}
			out[g.Group] = fetchedGroup{commits: groupCommits(g), err: kerr.ErrorForCode(g.ErrorCode)}
		}
	}
	return out
}

// groupCommits is one group's answer by topic, indexed by partition.
func groupCommits(g *kmsg.OffsetFetchResponseGroup) map[string][]committed {
	rs := make(map[string][]committed, len(g.Topics))
	for _, t := range g.Topics {
		n := int32(0)
		for _, p := range t.Partitions {
			n = max(n, p.Partition+1)
		}
		cs := make([]committed, n)
		for _, p := range t.Partitions {
			if p.Partition >= 0 {
				cs[p.Partition] = committed{at: p.Offset, err: kerr.ErrorForCode(p.ErrorCode), ok: true}
			}
		}
		rs[t.Topic] = cs
	}
	return rs
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
