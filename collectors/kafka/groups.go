package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// groupState is what one collection learned of one group.
type groupState struct {
	name, typ  string
	state      string // as the broker reports it: Stable, Empty, ...
	members    int
	membersOK  bool
	assigned   []string
	subscribed []string
	commits    map[string][]committed // by topic, indexed by partition
	commitsOK  bool
	gone       bool
	// readUncommitted: the group's consumers read with read_uncommitted
	// isolation (kafka.NAME.isolation, isolations).
	readUncommitted bool
}

// listGroups lists the cluster's groups with their types and selects the
// configured ones. A listing that fails on every broker is an error; one
// that fails on some adds the groups the last collection knew, so that a
// down coordinator does not look like deleted groups. Matching groups of
// types without committed offsets to judge (share, streams) are logged
// once each instead of vanishing without a word.
func (c *Collector) listGroups(ctx context.Context, partial *[]error) (groups, shares []Listed, err error) {
	if len(c.groups) == 0 && len(c.shares) == 0 {
		return nil, nil, nil
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
		return nil, nil, fmt.Errorf("kafka %s: list groups: %w", c.cluster, err)
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
	for _, g := range Unsupported(all, c.groups) {
		if !c.warned[g.Name] {
			c.warned[g.Name] = true
			c.logger.Warn("kafka group matches the configured groups but has no committed offsets to judge: not exported (share groups are selected by share_groups)",
				"cluster", c.cluster, "group", g.Name, "type", g.Type)
		}
	}
	return SelectGroups(all, c.groups), SelectShareGroups(all, c.shares), nil
}

// described is a classic or KIP-848 describe answer in one shape.
type described struct {
	err        error
	state      string
	members    int
	assigned   []string
	subscribed []string
}

// describe reads the members and commits of the selected groups: classic
// groups with DescribeGroups, KIP-848 consumer groups with
// DescribeConsumerGroups (DescribeGroups does not describe them: Kafka
// 4.x answers GROUP_ID_NOT_FOUND, kfake an empty member list), and the
// commits of all in one OffsetFetch per coordinator. The three run at once.
func (c *Collector) describe(ctx context.Context, selected []Listed, partial *[]error) []*groupState {
	var classic, consumer, all []string
	states := make([]*groupState, 0, len(selected))
	byName := make(map[string]*groupState, len(selected))
	for _, g := range selected {
		s := &groupState{name: g.Name, typ: g.Type, readUncommitted: c.cfg.ReadUncommitted(g.Name)}
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
		wg               sync.WaitGroup
		oldDesc, newDesc map[string]described
		oldErr, newErr   error
		fetched          map[string]fetchedGroup
	)
	if len(classic) > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); oldDesc, oldErr = c.describeClassic(ctx, classic) }()
	}
	if len(consumer) > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); newDesc, newErr = c.describeConsumer(ctx, consumer) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); fetched = fetchCommits(ctx, c.cl, all) }()
	wg.Wait()

	if oldErr != nil {
		*partial = append(*partial, fmt.Errorf("describe groups: %w", oldErr))
	}
	if newErr != nil {
		*partial = append(*partial, fmt.Errorf("describe consumer groups: %w", newErr))
	}
	for _, descs := range []map[string]described{oldDesc, newDesc} {
		for name, d := range descs {
			s := byName[name]
			switch {
			case s == nil:
			case errors.Is(d.err, kerr.GroupIDNotFound) || d.state == "Dead":
				s.gone = true
			case d.err != nil:
				*partial = append(*partial, fmt.Errorf("describe group %s: %w", name, d.err))
			default:
				s.state, s.members, s.membersOK = d.state, d.members, true
				s.assigned, s.subscribed = d.assigned, d.subscribed
			}
		}
	}
	for name, r := range fetched {
		s := byName[name]
		switch {
		case s == nil:
		case errors.Is(r.err, kerr.GroupIDNotFound):
			s.gone = true
		case r.err != nil:
			*partial = append(*partial, fmt.Errorf("committed offsets of group %s: %w", name, r.err))
		default:
			s.commits, s.commitsOK = r.commits, true
		}
	}
	return states
}

func (c *Collector) describeClassic(ctx context.Context, groups []string) (map[string]described, error) {
	res, err := c.adm.DescribeGroups(ctx, groups...)
	out := make(map[string]described, len(res))
	for name, d := range res {
		x := described{err: d.Err, state: d.State, members: len(d.Members)}
		for _, m := range d.Members {
			if a, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range a.Topics {
					x.assigned = append(x.assigned, t.Topic)
				}
			}
			if j, ok := m.Join.AsConsumer(); ok {
				x.subscribed = append(x.subscribed, j.Topics...)
			}
		}
		out[name] = x
	}
	return out, err
}

func (c *Collector) describeConsumer(ctx context.Context, groups []string) (map[string]described, error) {
	res, err := c.adm.DescribeConsumerGroups(ctx, groups...)
	out := make(map[string]described, len(res))
	for name, d := range res {
		x := described{err: d.Err, state: d.State, members: len(d.Members)}
		for _, m := range d.Members {
			for t := range m.Assignment {
				// An assignment named only by topic ID has no name
				// here; its partitions count through the commits.
				if t != "" {
					x.assigned = append(x.assigned, t)
				}
			}
			x.subscribed = append(x.subscribed, m.SubscribedTopics...)
		}
		out[name] = x
	}
	return out, err
}
