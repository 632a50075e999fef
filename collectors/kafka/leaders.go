package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Following a partition to its new leader during a Read (a rolling
// restart), apart from the reading itself.

// relead reads the metadata of stale partitions' topics again and points
// them at their current leaders.
func (p *Prober) relead(ctx context.Context, ss []*partState) {
	seen := map[string]bool{}
	var topics []string
	for _, s := range ss {
		if !seen[s.topic] {
			seen[s.topic] = true
			topics = append(topics, s.topic)
		}
	}
	// A direct request: kadm's Metadata may answer from kgo's cache,
	// which still names the old leader.
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, p.cl)
	type leaderOf struct {
		t string
		p int32
	}
	leaders := map[leaderOf]int32{}
	ids := map[string]kadm.TopicID{}
	if err == nil {
		for _, rt := range resp.Topics {
			if rt.Topic == nil || rt.ErrorCode != 0 {
				continue
			}
			ids[*rt.Topic] = rt.TopicID
			for _, rp := range rt.Partitions {
				if rp.ErrorCode == 0 {
					leaders[leaderOf{*rt.Topic, rp.Partition}] = rp.Leader
				}
			}
		}
	}
	for _, s := range ss {
		s.stale = false
		s.moves++
		leader, ok := leaders[leaderOf{s.topic, s.part}]
		switch {
		case err != nil:
			s.err = fmt.Errorf("read %s/%d: refresh metadata after a leader change: %w", s.topic, s.part, err)
		case s.moves > maxMoves:
			s.err = fmt.Errorf("read %s/%d: the leader moved %d times during one scrape", s.topic, s.part, s.moves)
		case !ok || leader < 0:
			s.err = fmt.Errorf("read %s/%d: no leader after a leader change", s.topic, s.part)
		default:
			s.leader, s.id = leader, ids[s.topic]
		}
	}
}

// leaderGone reports a partition error after which the partition is read
// again from its current leader.
func leaderGone(err error) bool {
	return errors.Is(err, kerr.NotLeaderForPartition) || errors.Is(err, kerr.FencedLeaderEpoch) ||
		errors.Is(err, kerr.LeaderNotAvailable) || errors.Is(err, kerr.UnknownLeaderEpoch) ||
		errors.Is(err, kerr.ReplicaNotAvailable)
}
