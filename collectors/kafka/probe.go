package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Want asks for the first data record of a partition at or after From.
// Uncommitted reads as a read_uncommitted consumer does: records of
// aborted and open transactions are data too.
type Want struct {
	Topic       string
	Partition   int32
	From        int64
	Uncommitted bool
}

// Probe limits. A round sends one Fetch request per leader broker holding
// every partition still to read; partitionBytes keeps one partition's
// share small (a probe needs only the batch holding the offset), and
// requestBytes bounds what one response holds in memory.
const (
	partitionBytes = 256 << 10
	requestBytes   = 4 << 20
	maxRounds      = 12
	// maxMoves bounds how often one Read follows a partition to a new
	// leader (a rolling restart moves it once or twice).
	maxMoves = 3
)

// Prober reads the first data record at given offsets, with each want's
// isolation (read_committed unless Uncommitted) and batched per leader
// broker. It is safe for one caller at a
// time.
type Prober struct {
	cl      *kgo.Client
	fetches atomic.Int64
}

// Fetches returns how many Fetch requests the Prober has sent.
func (p *Prober) Fetches() int64 { return p.fetches.Load() }

// NewProber returns a Prober over cl.
func NewProber(cl *kgo.Client) *Prober { return &Prober{cl: cl} }

// partState is the reading state of one partition: the offsets still
// asked for and where the next read starts.
type partState struct {
	topic   string
	id      kadm.TopicID
	part    int32
	leader  int32
	pending []ask // sorted by offset, unanswered
	// carried are asked offsets below cursor whose range up to cursor
	// held no data: they share the answer of cursor.
	carried []ask
	cursor  int64
	empties int // consecutive rounds that returned nothing
	// stable is the last stable offset of the last answer, -1 before one.
	stable int64
	// stale is set when the leader did not answer for the partition
	// (NOT_LEADER, a broker gone): metadata is read again and the
	// partition retried; moves counts those.
	stale bool
	moves int
	err   error
	// uncommitted: read with read_uncommitted isolation.
	uncommitted bool
}

// Warm opens the fetch connection to every known broker (kgo keeps fetches
// on a connection of their own) with an empty Fetch, so that a first Read
// does not wait for dials and version handshakes. Errors are ignored:
// Read reports its own.
func (p *Prober) Warm(ctx context.Context) {
	var wg sync.WaitGroup
	for _, b := range p.cl.DiscoveredBrokers() {
		wg.Add(1)
		go func(b *kgo.Broker) {
			defer wg.Done()
			req := kmsg.NewPtrFetchRequest()
			req.MaxWaitMillis = 0
			req.SessionEpoch = -1
			_, _ = b.Request(ctx, req)
		}(b)
	}
	wg.Wait()
}

// ask is one asked offset and the index of its want.
type ask struct {
	off int64
	idx int
}

// answers holds Read's results by want index. Each index is written by
// the one partition state holding it, so brokers' goroutines write
// without a lock.
type answers struct {
	probes []Probe
	ok     []bool
}

func (a answers) set(x ask, pr Probe) {
	pr.From = x.off
	a.probes[x.idx], a.ok[x.idx] = pr, true
}

// Read returns what reading each want's partition from its offset found:
// probes[i] answers wants[i] when ok[i]. Partitions it could not read are
// left unanswered and their errors joined in the returned error; the
// others are still answered. meta must hold the leaders and topic IDs of
// the wanted partitions. Read returns by ctx's deadline.
//
// Work is bounded: after maxRounds a partition still unsettled (a long run
// of aborted records, say) is answered with where the reading got to, a
// Probe that is neither Found nor at the end. Decide reports its time lag
// unknown, and the caller continues from Next on the next scrape
// (Probe.Usable, Probe.Continue) instead of starting again at the commit.
//
// A partition whose leader does not answer for it (NOT_LEADER_OR_FOLLOWER,
// FENCED_LEADER_EPOCH, the broker gone in a rolling restart) is followed
// to its new leader with fresh metadata, within ctx and maxMoves.
//
// One Fetch carries one isolation level: wants of both are read as two
// reads at once.
func (p *Prober) Read(ctx context.Context, meta kadm.TopicDetails, wants []Want) (probes []Probe, ok []bool, err error) {
	var byIso [2][]int
	for i, w := range wants {
		if w.Uncommitted {
			byIso[1] = append(byIso[1], i)
		} else {
			byIso[0] = append(byIso[0], i)
		}
	}
	if len(byIso[0]) == 0 || len(byIso[1]) == 0 {
		return p.read(ctx, meta, wants, len(byIso[1]) > 0)
	}
	probes, ok = make([]Probe, len(wants)), make([]bool, len(wants))
	var (
		wg   sync.WaitGroup
		errs [2]error
	)
	for iso, idx := range byIso {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub := make([]Want, len(idx))
			for j, i := range idx {
				sub[j] = wants[i]
			}
			ps, oks, err := p.read(ctx, meta, sub, iso == 1)
			for j, i := range idx {
				probes[i], ok[i] = ps[j], oks[j]
			}
			errs[iso] = err
		}()
	}
	wg.Wait()
	return probes, ok, errors.Join(errs[0], errs[1])
}

// read is Read for wants of one isolation.
func (p *Prober) read(ctx context.Context, meta kadm.TopicDetails, wants []Want, uncommitted bool) (probes []Probe, ok []bool, err error) {
	out := answers{probes: make([]Probe, len(wants)), ok: make([]bool, len(wants))}
	states, errs := plan(meta, wants)
	for _, s := range states {
		s.uncommitted = uncommitted
	}
	for round := 0; round < maxRounds && len(states) > 0; round++ {
		if err := ctx.Err(); err != nil {
			errs = append(errs, fmt.Errorf("read oldest records: %w", err))
			break
		}
		p.round(ctx, states, out)
		live := states[:0]
		var stale []*partState
		for _, s := range states {
			switch {
			case s.err != nil:
				errs = append(errs, s.err)
			case s.stale:
				stale = append(stale, s)
				live = append(live, s)
			case len(s.pending) > 0 || len(s.carried) > 0:
				live = append(live, s)
			}
		}
		states = live
		if len(stale) > 0 {
			p.relead(ctx, stale)
		}
	}
	for _, s := range states {
		switch {
		case s.err != nil:
			errs = append(errs, s.err)
		case s.stale:
			errs = append(errs, fmt.Errorf("read %s/%d: no leader answered within %d rounds", s.topic, s.part, maxRounds))
		default:
			s.suspend(out)
		}
	}
	return out.probes, out.ok, errors.Join(errs...)
}

// suspend answers the offsets of a partition not settled within the
// rounds with how far the reading got: no data record in [offset, Next).
// Without a last stable offset nothing is claimed: the offsets stay
// unanswered.
func (s *partState) suspend(out answers) {
	if s.stable < 0 {
		return
	}
	for _, a := range s.carried {
		out.set(a, Probe{Next: s.cursor, Stable: s.stable})
	}
	for _, a := range s.pending {
		out.set(a, Probe{Next: a.off, Stable: s.stable})
	}
	s.carried, s.pending = nil, nil
}

// plan groups wants by partition.
func plan(meta kadm.TopicDetails, wants []Want) ([]*partState, []error) {
	// Partitions by topic, then by number: wants come topic by topic, so
	// a topic name is hashed once per run of wants, not once per want.
	byTopic := map[string][]*partState{}
	var (
		errs    []error
		states  []*partState
		curName string
		cur     []*partState
		curOK   bool
	)
	for i, w := range wants {
		if !curOK || w.Topic != curName {
			byTopic[curName] = cur
			curName, curOK = w.Topic, true
			cur = byTopic[w.Topic]
		}
		if w.Partition < 0 {
			errs = append(errs, fmt.Errorf("read %s/%d: no such partition", w.Topic, w.Partition))
			continue
		}
		for int(w.Partition) >= len(cur) {
			cur = append(cur, nil)
		}
		s := cur[w.Partition]
		if s == nil {
			td, ok := meta[w.Topic]
			pd, pok := td.Partitions[w.Partition]
			if !ok || !pok || td.Err != nil || pd.Err != nil || pd.Leader < 0 {
				s = &partState{err: fmt.Errorf("read %s/%d: no leader known", w.Topic, w.Partition)}
				cur[w.Partition] = s
				errs = append(errs, s.err)
				continue
			}
			s = &partState{topic: w.Topic, id: td.ID, part: w.Partition, leader: pd.Leader, stable: -1}
			cur[w.Partition] = s
			states = append(states, s)
		}
		if s.err != nil {
			continue
		}
		s.pending = append(s.pending, ask{off: w.From, idx: i})
	}
	for _, s := range states {
		sort.Slice(s.pending, func(i, j int) bool { return s.pending[i].off < s.pending[j].off })
		s.cursor = s.pending[0].off
	}
	return states, errs
}

// round sends one Fetch per leader broker and folds the answers in.
func (p *Prober) round(ctx context.Context, states []*partState, out answers) {
	byLeader := map[int32][]*partState{}
	for _, s := range states {
		byLeader[s.leader] = append(byLeader[s.leader], s)
	}
	var wg sync.WaitGroup
	for leader, ss := range byLeader {
		wg.Add(1)
		go func(leader int32, ss []*partState) {
			defer wg.Done()
			// A partition starved in earlier rounds goes first: a broker
			// always returns the first partition's first batch, however
			// large.
			sort.SliceStable(ss, func(i, j int) bool { return ss[i].empties > ss[j].empties })
			req := kmsg.NewPtrFetchRequest()
			req.MaxWaitMillis = 0
			req.MinBytes = 0
			req.MaxBytes = requestBytes
			req.IsolationLevel = 1 // read_committed
			if ss[0].uncommitted {
				req.IsolationLevel = 0
			}
			req.SessionID = 0
			req.SessionEpoch = -1 // no fetch session
			topicIdx := map[string]int{}
			for _, s := range ss {
				i, ok := topicIdx[s.topic]
				if !ok {
					rt := kmsg.NewFetchRequestTopic()
					rt.Topic = s.topic
					rt.TopicID = s.id
					req.Topics = append(req.Topics, rt)
					i = len(req.Topics) - 1
					topicIdx[s.topic] = i
				}
				rp := kmsg.NewFetchRequestTopicPartition()
				rp.Partition = s.part
				rp.FetchOffset = s.cursor
				rp.CurrentLeaderEpoch = -1
				rp.LogStartOffset = -1
				rp.PartitionMaxBytes = partitionBytes
				if s.empties > 1 {
					rp.PartitionMaxBytes = requestBytes
				}
				req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
			}
			p.fetches.Add(1)
			kresp, err := p.cl.Broker(int(leader)).Request(ctx, req)
			if err == nil {
				err = kerr.ErrorForCode(kresp.(*kmsg.FetchResponse).ErrorCode)
			}
			if err != nil {
				for _, s := range ss {
					if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || s.moves >= maxMoves {
						s.err = fmt.Errorf("fetch from broker %d for %s/%d: %w", leader, s.topic, s.part, err)
						continue
					}
					// The broker may be restarting: ask who leads now.
					s.stale = true
				}
				return
			}
			foldResponse(ss, kresp.(*kmsg.FetchResponse), out)
		}(leader, ss)
	}
	wg.Wait()
}

// foldResponse folds one broker's Fetch answer into its partitions. The
// brokers' answers are decoded in parallel; each touches only its own
// partitions.
func foldResponse(ss []*partState, resp *kmsg.FetchResponse, out answers) {
	type tp struct {
		t string
		p int32
	}
	byTP := make(map[tp]*partState, len(ss))
	idName := map[kadm.TopicID]string{}
	for _, s := range ss {
		byTP[tp{s.topic, s.part}] = s
		idName[s.id] = s.topic
	}
	for i := range resp.Topics {
		rt := &resp.Topics[i]
		name := rt.Topic
		if name == "" {
			name = idName[kadm.TopicID(rt.TopicID)]
		}
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			if s := byTP[tp{name, rp.Partition}]; s != nil {
				delete(byTP, tp{name, rp.Partition})
				fold(s, rp, out)
			}
		}
	}
	for _, s := range byTP {
		s.empties++ // not in the answer
	}
}

// fold takes one partition's fetch answer into its state and answers the
// offsets it settles.
func fold(s *partState, rp *kmsg.FetchResponseTopicPartition, out answers) {
	switch err := kerr.ErrorForCode(rp.ErrorCode); {
	case errors.Is(err, kerr.OffsetOutOfRange) && rp.LogStartOffset >= 0 && s.cursor < rp.LogStartOffset:
		// Retention deleted the asked offsets: the oldest record left
		// is at the log start (kfake says where it is).
		s.carry(rp.LogStartOffset)
		return
	case errors.Is(err, kerr.OffsetOutOfRange) && rp.HighWatermark >= 0 && s.cursor >= rp.HighWatermark:
		s.finish(s.cursor, rp.LastStableOffset, out)
		return
	case errors.Is(err, kerr.OffsetOutOfRange):
		// Apache Kafka answers an out-of-range fetch with -1 for the
		// high watermark, the last stable offset and the log start:
		// nothing is known, least of all "caught up". Retention moved
		// the log start after it was listed; the next scrape lists it
		// again.
		s.err = fmt.Errorf("fetch %s/%d at %d: %w (log start moved since it was listed)", s.topic, s.part, s.cursor, err)
		return
	case leaderGone(err) && s.moves < maxMoves:
		s.stale = true
		return
	case err != nil:
		s.err = fmt.Errorf("fetch %s/%d at %d: %w", s.topic, s.part, s.cursor, err)
		return
	}
	stable := rp.LastStableOffset
	if stable < 0 || s.uncommitted {
		// A read_uncommitted consumer reads up to the high watermark.
		stable = rp.HighWatermark
	}
	s.stable = stable
	// Every asked offset, carried ones (below the cursor) first.
	asks := append(s.carried, s.pending...)
	answered, next, err := scan(rp, s.cursor, asks, func(a ask, offset, millis int64) {
		pr := Probe{Next: offset + 1, Stable: stable, Found: true, Offset: offset}
		if millis >= 0 { // -1 is NO_TIMESTAMP
			pr.Timestamp = time.UnixMilli(millis)
		}
		out.set(a, pr)
	})
	if err != nil {
		s.err = fmt.Errorf("decode %s/%d at %d: %w", s.topic, s.part, s.cursor, err)
		return
	}
	rest := asks[answered:]
	if next <= s.cursor {
		if s.cursor >= stable {
			// Nothing readable past the cursor: at the end, or only
			// open transactions remain.
			s.carried, s.pending = nil, rest
			s.finish(s.cursor, stable, out)
			return
		}
		s.empties++
		return
	}
	s.empties = 0
	// Unanswered offsets below next had no data record up to next.
	i := sort.Search(len(rest), func(i int) bool { return rest[i].off >= next })
	s.carried = append([]ask(nil), rest[:i]...)
	s.pending = append([]ask(nil), rest[i:]...)
	if next >= stable {
		// Nothing more is readable: the rest have no data record.
		s.finish(next, stable, out)
		return
	}
	switch {
	case len(s.carried) > 0:
		s.cursor = next
	case len(s.pending) > 0:
		s.cursor = s.pending[0].off
	}
}

// carry moves the cursor to at, carrying every pending offset below it.
func (s *partState) carry(at int64) {
	for len(s.pending) > 0 && s.pending[0].off < at {
		s.carried = append(s.carried, s.pending[0])
		s.pending = s.pending[1:]
	}
	s.cursor = at
}

// finish answers every offset still asked: nothing can be read at or
// after next, so none has a data record before it.
func (s *partState) finish(next, stable int64, out answers) {
	for _, a := range append(s.carried, s.pending...) {
		out.set(a, Probe{Next: max(a.off, next), Stable: stable})
	}
	s.carried, s.pending = nil, nil
}
