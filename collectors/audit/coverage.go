package audit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Coverage: the span of record time in which the tailer has seen every
// record the relays wrote. A row is judged missing only if its record
// would fall inside it; otherwise retention or compaction, not the relay,
// may be why the id is absent.
//
// Per partition, at start:
//   - records up to one window back are retained (the first record at or
//     after start−window is not the log start, or the log start is 0):
//     covered from start−window;
//   - the log start is past 0 and the window reaches before it: records
//     of the window were deleted (retention, DeleteRecords). Covered from
//     the timestamp of the first record still held, or from start if the
//     partition holds none. On a compacted topic the same whenever the
//     log start is past 0: compaction leaves offset gaps, so the offset
//     before the window's first record may be gone and prove nothing;
//   - the topic is compacted and the event id is not the record key:
//     compaction may have removed any record older than
//     min.compaction.lag.ms, so covered from start−min.compaction.lag.ms.
//     With the id in the key the newest record of an id survives, unless
//     a tombstone for it is older than delete.retention.ms: covered from
//     start−delete.retention.ms.
//
// Records read after start are read while the broker still holds them,
// so the coverage reaches back further as time passes, up to the window.
// The audit's span is the latest coverage start over all partitions,
// because a row's record may be on any of them.

// partitionListing is what the brokers said about one partition at start.
type partitionListing struct {
	logStart int64 // first offset held
	atFrom   int64 // first offset with a timestamp at or after start−window; the end offset if none
	end      int64 // last stable offset
}

// topicPolicy is what a topic's configuration says about deletions.
type topicPolicy struct {
	compacted bool
	// compactLag is min.compaction.lag.ms, tombstoneLag
	// delete.retention.ms (ms).
	compactLag, tombstoneLag int64
}

// partitionCover returns the coverage start (ms) of a partition listed as
// l, for an audit started at start whose window began at from, or
// fromFirst when it is the timestamp of the first record the tailer will
// read there (not yet known).
func partitionCover(l partitionListing, p topicPolicy, idInKey bool, from, start int64) (cover int64, fromFirst bool) {
	cover = from
	if p.compacted {
		lag := p.compactLag
		if idInKey {
			lag = p.tombstoneLag
		}
		cover = max(cover, start-lag)
	}
	// Records were deleted, and perhaps some of the window's: either the
	// window reaches the log start, or compaction may have left a gap
	// just before the window's first offset, so the record before it
	// need not exist to prove the window complete.
	if l.logStart > 0 && (l.atFrom <= l.logStart || p.compacted) {
		if l.atFrom >= l.end {
			return max(cover, start), false
		}
		return cover, true
	}
	return cover, false
}

// listing asks the brokers for every partition's log start, first offset
// of the window, last stable offset, and each topic's deletion policy.
func (a *Auditor) listing(ctx context.Context, adm *kadm.Client, from int64) (map[topicPartition]partitionListing, map[string]topicPolicy, error) {
	topics := a.cfg.Topics
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list start offsets of %v: %w", topics, err)
	}
	at, err := adm.ListOffsetsAfterMilli(ctx, from, topics...)
	if err == nil {
		err = at.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list offsets of %v after %d: %w", topics, from, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list end offsets of %v: %w", topics, err)
	}
	out := map[topicPartition]partitionListing{}
	ends.Each(func(o kadm.ListedOffset) {
		l := partitionListing{end: o.Offset, atFrom: o.Offset}
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok {
			l.logStart = s.Offset
		}
		if s, ok := at.Lookup(o.Topic, o.Partition); ok && s.Offset >= 0 {
			l.atFrom = s.Offset
		}
		out[topicPartition{o.Topic, o.Partition}] = l
	})
	policies, err := topicPolicies(ctx, adm, topics)
	if err != nil {
		return nil, nil, err
	}
	return out, policies, nil
}

func topicPolicies(ctx context.Context, adm *kadm.Client, topics []string) (map[string]topicPolicy, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("describe configs of %v: %w", topics, err)
	}
	out := map[string]topicPolicy{}
	for _, rc := range rcs {
		if rc.Err != nil {
			return nil, fmt.Errorf("describe configs of topic %s: %w", rc.Name, rc.Err)
		}
		p := topicPolicy{tombstoneLag: 24 * time.Hour.Milliseconds()}
		for _, c := range rc.Configs {
			if c.Value == nil {
				continue
			}
			switch c.Key {
			case "cleanup.policy":
				p.compacted = strings.Contains(*c.Value, "compact")
			case "min.compaction.lag.ms":
				p.compactLag, _ = strconv.ParseInt(*c.Value, 10, 64)
			case "delete.retention.ms":
				p.tombstoneLag, _ = strconv.ParseInt(*c.Value, 10, 64)
			}
		}
		out[rc.Name] = p
	}
	return out, nil
}

// partState is the tailer's view of one partition.
type partState struct {
	base     int64 // offset the tailer starts from
	consumed int64 // next offset after the last record read; base until one is
	// cover is the coverage start (ms); pending while the first
	// record's timestamp is awaited.
	cover   int64
	pending bool
}

// listTargets lists every partition once at start (retrying until the
// brokers answer) and sets its coverage; the tailer is ready when it has
// read up to the end offsets listed then.
func (a *Auditor) listTargets(ctx context.Context) {
	adm := kadm.NewClient(a.client)
	for {
		a.mu.Lock()
		from, start := a.fromMs, a.started.UnixMilli()
		a.mu.Unlock()
		parts, policies, err := a.listing(ctx, adm, from)
		if err == nil {
			a.mu.Lock()
			a.setListing(parts, policies, from, start)
			a.tailErr = nil
			a.updateReady()
			a.mu.Unlock()
			return
		}
		a.mu.Lock()
		a.tailErr = err
		a.mu.Unlock()
		a.logger.Warn("list topic offsets", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(listRetry):
		}
	}
}

// setListing records the start listing. Call with mu held.
func (a *Auditor) setListing(parts map[topicPartition]partitionListing, policies map[string]topicPolicy, from, start int64) {
	a.need = map[topicPartition]int64{}
	for tp, l := range parts {
		ps := a.part(tp)
		ps.base = max(l.atFrom, l.logStart)
		if ps.consumed < ps.base {
			ps.consumed = ps.base
		}
		cover, first := partitionCover(l, policies[tp.topic], a.extract.InKey(), from, start)
		ps.cover = cover
		// A record read before the listing answered already gives the
		// first timestamp.
		if first {
			if ts, ok := a.firstTS[tp]; ok {
				ps.cover = max(cover, ts)
			} else {
				ps.pending = true
			}
		}
		a.need[tp] = l.end
		if cover > from || first {
			a.logger.Info("audit window shortened: records deleted or compacted", "topic", tp.topic, "partition", tp.partition,
				"covered_from", time.UnixMilli(ps.cover).UTC(), "awaiting_first_record", ps.pending)
		}
	}
}

func (a *Auditor) part(tp topicPartition) *partState {
	ps, ok := a.parts[tp]
	if !ok {
		ps = &partState{}
		a.parts[tp] = ps
	}
	return ps
}

// tailerFrom is the coverage start over all partitions (ms). Call with mu
// held, once ready.
func (a *Auditor) tailerFrom() int64 {
	from := a.fromMs
	for _, ps := range a.parts {
		from = max(from, ps.cover)
	}
	return from
}

// updateReady opens the gate once every listed end offset was consumed
// and every awaited first timestamp is known. Call with mu held.
func (a *Auditor) updateReady() {
	if a.ready || a.need == nil {
		return
	}
	for tp, end := range a.need {
		ps := a.part(tp)
		if ps.consumed < end || ps.pending {
			return
		}
	}
	a.ready = true
	a.logger.Info("audit window read", "since", time.UnixMilli(a.tailerFrom()).UTC())
}

// caughtUp reports whether the tailer has read every partition up to ends.
func (a *Auditor) caughtUp(ends map[topicPartition]int64) (bool, int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var behind int64
	for tp, end := range ends {
		ps := a.part(tp)
		if ps.consumed < end && end > ps.base {
			behind += end - ps.consumed
		}
	}
	return behind == 0, behind
}

// waitCaughtUp lists the last stable offsets and waits until the tailer
// has read up to them, so that every record written before the call is
// in the window when rows are judged (the tailer's reading).
func (a *Auditor) waitCaughtUp(ctx context.Context) error {
	adm := kadm.NewClient(a.client)
	ends, err := adm.ListCommittedOffsets(ctx, a.cfg.Topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("list end offsets of %v: %w", a.cfg.Topics, err)
	}
	want := map[topicPartition]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[topicPartition{o.Topic, o.Partition}] = o.Offset })
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, behind := a.caughtUp(want)
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the tailer is %d records behind the topics: %w", behind, ctx.Err())
		case <-tick.C:
		}
	}
}
