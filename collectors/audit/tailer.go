package audit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// Fetch buffering of the tailer: at most maxConcurrentFetches responses of
// fetchMaxBytes each are in flight or buffered, which bounds the
// consumer's memory while it re-reads the window at start (kgo's defaults,
// 50 MiB per fetch and one per broker, cost about 100 MB more resident
// memory in auditbench). 50,000 records/s of 300 bytes are 15 MB/s;
// auditbench reads 1M records/s with these. A short fetchMaxWait keeps a
// broker with no new data from holding up the others.
const (
	fetchMaxBytes        = 1 << 20
	maxConcurrentFetches = 3
	fetchMaxWait         = time.Second
	// recentIDs is how many recent sampled ids the tailer keeps as text,
	// to tell an id-format mismatch from a real loss (see mismatch.go).
	recentIDs = 64
)

// ConsumerOpts are the tailer's kgo options for an audit started at now:
// its topics from one window back, read-committed, no group, no commits.
// The benchmark's bare-consumer baseline uses the same.
func ConsumerOpts(a *config.Audit, now time.Time) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumeTopics(a.Topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(now.Add(-a.Window).UnixMilli())),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records carry offsets too; the tailer needs them to
		// know it reached the end offsets listed at start.
		kgo.KeepControlRecords(),
		kgo.FetchMaxBytes(fetchMaxBytes),
		kgo.MaxConcurrentFetches(maxConcurrentFetches),
		kgo.FetchMaxWait(fetchMaxWait),
	}
}

type sampledRecord struct {
	id []byte // aliases the record; used only within the batch
	fp uint64
	ts int64
}

// poll is what one PollRecords gave, reduced to what the window needs.
type poll struct {
	a       *Auditor
	start   int64 // the auditor's start (ms)
	batch   []sampledRecord
	offsets map[topicPartition]int64 // next offset per partition
	firsts  map[topicPartition]int64 // timestamp of the first record per partition
	n       uint64                   // records, control records excluded
	// malformed counts records from start on without an id; reread those
	// older than start.
	malformed, reread uint64
}

// record handles one record of the poll: offsets, id, sample. Further
// per-record checks hook in here.
func (p *poll) record(r *kgo.Record) {
	tp := topicPartition{r.Topic, r.Partition}
	if r.Offset+1 > p.offsets[tp] {
		p.offsets[tp] = r.Offset + 1
	}
	if _, ok := p.firsts[tp]; !ok {
		p.firsts[tp] = r.Timestamp.UnixMilli()
	}
	if r.Attrs.IsControl() {
		return
	}
	p.n++
	p.a.order.observe(r, p.start)
	id, err := p.a.extract.ID(r)
	if err != nil {
		if r.Timestamp.UnixMilli() < p.start {
			p.reread++
		} else {
			p.malformed++
		}
		p.a.logger.Debug("skip record without event id", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", err)
		return
	}
	h, fp := Digest(id)
	if !p.a.sampler.Sampled(h) {
		return
	}
	p.batch = append(p.batch, sampledRecord{id: id, fp: fp, ts: r.Timestamp.UnixMilli()})
}

func (a *Auditor) tail(ctx context.Context) {
	p := &poll{a: a, batch: make([]sampledRecord, 0, 1024)}
	for {
		fs := a.client.PollRecords(ctx, pollRecords)
		if fs.IsClientClosed() || ctx.Err() != nil {
			return
		}
		var fetchErr error
		fs.EachError(func(topic string, part int32, err error) {
			if !errors.Is(err, context.Canceled) {
				fetchErr = fmt.Errorf("fetch %s[%d]: %w", topic, part, err)
			}
		})
		p.batch = p.batch[:0]
		p.n, p.malformed, p.reread = 0, 0, 0
		p.start = a.startedAt().UnixMilli()
		p.offsets = map[topicPartition]int64{}
		p.firsts = map[topicPartition]int64{}
		fs.EachRecord(p.record)
		a.observe(p, fetchErr)
		clear(p.batch) // drop references to the records
	}
}

// observe adds a poll to the window.
func (a *Auditor) observe(p *poll, fetchErr error) {
	now := a.clock().UnixMilli()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.records += p.n
	a.malformed += p.malformed
	a.reread += p.reread
	for _, r := range p.batch {
		dup, in := a.win.add(r.fp, r.ts, now)
		if !in {
			continue
		}
		a.sampled++
		// Every 8th sampled id is kept as text: the ring then spans the
		// last 512 sampled records at one small allocation per 8.
		if a.sampled&7 == 1 {
			a.recent[a.recentNext%recentIDs] = recentID{id: string(r.id), ts: r.ts}
			a.recentNext++
		}
		if dup {
			if r.ts >= p.start {
				a.duplicates++
			}
			a.noteDuplicate(r.id, r.ts)
		}
	}
	a.win.advance(now)
	horizon := now - a.win.span
	for id, d := range a.dups {
		if d.LastSeen.UnixMilli() < horizon {
			delete(a.dups, id)
		}
	}
	for tp, ts := range p.firsts {
		if _, ok := a.firstTS[tp]; !ok {
			a.firstTS[tp] = ts
		}
		if ps := a.part(tp); ps.pending {
			ps.cover = max(ps.cover, ts)
			ps.pending = false
		}
	}
	for tp, off := range p.offsets {
		if ps := a.part(tp); off > ps.consumed {
			ps.consumed = off
		}
	}
	if fetchErr != nil && a.tailErr == nil {
		a.logger.Warn("tail topics", "err", fetchErr)
	}
	if a.need != nil || fetchErr != nil {
		a.tailErr = fetchErr
	}
	a.updateReady()
}

func (a *Auditor) noteDuplicate(id []byte, ts int64) {
	at := time.UnixMilli(ts).UTC()
	if d, ok := a.dups[string(id)]; ok {
		d.Copies++
		if at.After(d.LastSeen) {
			d.LastSeen = at
		}
		return
	}
	if len(a.dups) >= MaxFindings {
		a.dupsOver++
		return
	}
	a.dups[string(id)] = &Duplicate{ID: string(id), Copies: 2, LastSeen: at}
}

// recentID is a sampled id the tailer read, with its record's timestamp.
type recentID struct {
	id string
	ts int64
}
