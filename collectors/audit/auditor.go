// Package audit compares what an outbox says with what its topics hold,
// for a consistent sample of event ids (seed 000, section 3): rows marked
// published whose event never reached the broker (silent loss), rows still
// unpublished whose event is already there (a lost acknowledgement; a
// retry will duplicate), and events published more than once.
//
// The broker side is a tailer: a kgo consumer with no group and no
// commits that starts one window back and keeps a 60-bit fingerprint of
// every sampled id it sees, by record timestamp, for one window (see
// window: 6 bytes per id once its minute is sealed, about 8–9 bytes
// resident). Record values are read only to find a json:FIELD id and are
// never kept or logged.
//
// The outbox side is a query, every 30 s, of the sampled rows created in
// the window (id, state, published_at; no body), streamed and judged row
// by row by Judge. Both sides sample with the same function: MD5 of the
// id's text, in SQL md5(id::text), so the filter runs in PostgreSQL and
// only sampled rows travel; the cost is one range scan of created_at over
// the window and one md5 per scanned row. The id's text must be the same
// on both sides (id::text in the table, the header, key or JSON value on
// the topic).
//
// After a restart the window is re-read from the topics, so the findings
// are the same; counters count from the start only (see Start).
package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
)

const (
	// DefaultCompareInterval is how often Start compares the outbox with
	// the window.
	DefaultCompareInterval = 30 * time.Second
	// MaxFindings caps the ids listed per finding kind; the metrics keep
	// the true counts.
	MaxFindings = 1000
	// pollRecords bounds the records handled per poll.
	pollRecords = 10000
	// listRetry is how long the tailer waits before asking the brokers
	// for end offsets again.
	listRetry = 5 * time.Second
)

// Auditor audits one outbox against the topics its relays publish to.
type Auditor struct {
	name     string
	cfg      config.Audit
	pool     *pgxpool.Pool
	logger   *slog.Logger
	extract  Extractor
	sampler  Sampler
	query    string
	client   *kgo.Client
	interval time.Duration
	now      atomic.Pointer[func() time.Time]

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	started    time.Time
	win        *window
	records    uint64
	sampled    uint64
	malformed  uint64 // records from Start on
	reread     uint64 // malformed records older than Start
	duplicates uint64
	dups       map[string]*Duplicate
	dupsOver   int
	consumed   map[topicPartition]int64 // next offset per partition
	need       map[topicPartition]int64 // end offsets at start; nil until listed
	ready      bool
	tailErr    error
	result     *result
	cmpErr     error
	checked    uint64
	order      *orderTracker // order.go; nil without aggregate and sequence

	cmpMu       sync.Mutex // one comparison at a time; guards the fields below
	checkedUpTo time.Time
	firstSeen   map[string]time.Time
}

type topicPartition struct {
	topic     string
	partition int32
}

// Finding is one sampled row the audit flags, for repair.
type Finding struct {
	ID          string     `json:"id"`
	State       string     `json:"state"`
	CreatedAt   time.Time  `json:"created_at"`
	PublishedAt *time.Time `json:"published_at,omitempty"`
	// OnTopicBy is the latest time the first record with the id can
	// carry, for an unmarked row.
	OnTopicBy *time.Time `json:"on_topic_by,omitempty"`
}

// Duplicate is a sampled id seen on the topics more than once in the
// window.
type Duplicate struct {
	ID       string    `json:"id"`
	Copies   int       `json:"copies"`
	LastSeen time.Time `json:"last_seen"`
}

type result struct {
	at       time.Time
	missing  []Finding
	unmarked []Finding
	nMissing int
	nUnmark  int
}

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

// New builds the auditor of outbox name. It does not connect: Start does.
func New(name string, a *config.Audit, o *config.Outbox, k *config.Kafka, pool *pgxpool.Pool, logger *slog.Logger) (*Auditor, error) {
	if a == nil || o == nil || k == nil {
		return nil, fmt.Errorf("audit %q: missing audit, outbox or kafka configuration", name)
	}
	ext, err := ParseEventID(a.EventID)
	if err != nil {
		return nil, fmt.Errorf("audit %q: %w", name, err)
	}
	if a.Window <= 0 {
		return nil, fmt.Errorf("audit %q: window must be positive", name)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	now := time.Now()
	cl, err := kafkaclient.New(k, ConsumerOpts(a, now)...)
	if err != nil {
		return nil, fmt.Errorf("audit %q: %w", name, err)
	}
	ord, err := newOrderTracker(a)
	if err != nil {
		return nil, fmt.Errorf("audit %q: %w", name, err)
	}
	s := NewSampler(a.Sample)
	au := &Auditor{
		name:     name,
		cfg:      *a,
		pool:     pool,
		logger:   logger.With("audit", name),
		extract:  ext,
		sampler:  s,
		query:    outboxQuery(o, s),
		client:   cl,
		interval: DefaultCompareInterval,
		started:  now,
		win:      newWindow(a.Window.Milliseconds(), now.UnixMilli()),
		dups:     map[string]*Duplicate{},
		consumed: map[topicPartition]int64{},
		order:    ord,
	}
	au.setClock(time.Now)
	return au, nil
}

// setClock replaces the auditor's clock (tests move it past grace).
func (a *Auditor) setClock(now func() time.Time) { a.now.Store(&now) }

func (a *Auditor) clock() time.Time { return (*a.now.Load())() }

// Name is the audited outbox.
func (a *Auditor) Name() string { return a.name }

// SetCompareInterval changes how often Start compares; call before Start.
func (a *Auditor) SetCompareInterval(d time.Duration) {
	if d > 0 {
		a.interval = d
	}
}

// Start tails the topics and compares every interval until ctx ends or
// Close is called. Counters count what happens from Start on: records
// older than Start (the window re-read after a restart) rebuild the state
// and are listed in the report (duplicates, re-read malformed records),
// but do not add to the duplicates or malformed counters, and rows
// created more than grace before Start do not add to the checked counter;
// so a restart does not count the window twice. What happened while the
// exporter was down is in the report, not in the counters.
func (a *Auditor) Start(ctx context.Context) {
	ctx, a.cancel = context.WithCancel(ctx)
	a.mu.Lock()
	now := a.clock()
	a.started = now
	a.mu.Unlock()
	a.cmpMu.Lock()
	a.checkedUpTo = now
	a.cmpMu.Unlock()
	a.wg.Add(3)
	go func() { defer a.wg.Done(); a.listTargets(ctx) }()
	go func() { defer a.wg.Done(); a.tail(ctx) }()
	go func() { defer a.wg.Done(); a.compareLoop(ctx) }()
}

// Close stops the auditor and frees its state.
func (a *Auditor) Close() {
	if a.cancel != nil {
		a.cancel()
	}
	a.wg.Wait()
	a.client.Close()
	a.mu.Lock()
	a.win.free()
	a.mu.Unlock()
}

// listTargets records the end offset of every partition that holds
// records of the window, once; the tailer is ready when it reached them.
func (a *Auditor) listTargets(ctx context.Context) {
	adm := kadm.NewClient(a.client)
	for {
		need, err := a.endOffsets(ctx, adm)
		if err == nil {
			a.mu.Lock()
			a.need = need
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

func (a *Auditor) endOffsets(ctx context.Context, adm *kadm.Client) (map[topicPartition]int64, error) {
	a.mu.Lock()
	from := a.started.Add(-a.cfg.Window).UnixMilli()
	a.mu.Unlock()
	ends, err := adm.ListEndOffsets(ctx, a.cfg.Topics...)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %v: %w", a.cfg.Topics, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("list end offsets of %v: %w", a.cfg.Topics, err)
	}
	starts, err := adm.ListOffsetsAfterMilli(ctx, from, a.cfg.Topics...)
	if err != nil {
		return nil, fmt.Errorf("list offsets of %v after %d: %w", a.cfg.Topics, from, err)
	}
	if err := starts.Error(); err != nil {
		return nil, fmt.Errorf("list offsets of %v after %d: %w", a.cfg.Topics, from, err)
	}
	need := map[topicPartition]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok && s.Offset >= o.Offset {
			return
		}
		need[topicPartition{o.Topic, o.Partition}] = o.Offset
	})
	return need, nil
}

// updateReady opens the gate once every listed end offset was consumed.
// Call with mu held.
func (a *Auditor) updateReady() {
	if a.ready || a.need == nil {
		return
	}
	for tp, end := range a.need {
		if a.consumed[tp] < end {
			return
		}
	}
	a.ready = true
	a.logger.Info("audit window read", "since", a.started.Add(-a.cfg.Window))
}

func (a *Auditor) startedAt() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.started
}

// Ready reports whether the tailer has read the whole window that existed
// at Start; until then no row is judged.
func (a *Auditor) Ready() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ready
}

type sampledRecord struct {
	id []byte // aliases the record; used only within the batch
	fp uint64
	ts int64
}

func (a *Auditor) tail(ctx context.Context) {
	batch := make([]sampledRecord, 0, 1024)
	for {
		fs := a.client.PollRecords(ctx, pollRecords)
		if fs.IsClientClosed() || ctx.Err() != nil {
			return
		}
		var fetchErr error
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				fetchErr = fmt.Errorf("fetch %s[%d]: %w", topic, p, err)
			}
		})
		batch = batch[:0]
		var n, malformed, reread uint64
		start := a.startedAt().UnixMilli()
		offsets := map[topicPartition]int64{}
		fs.EachRecord(func(r *kgo.Record) {
			tp := topicPartition{r.Topic, r.Partition}
			if r.Offset+1 > offsets[tp] {
				offsets[tp] = r.Offset + 1
			}
			if r.Attrs.IsControl() {
				return
			}
			n++
			a.order.observe(r, start)
			id, err := a.extract.ID(r)
			if err != nil {
				if r.Timestamp.UnixMilli() < start {
					reread++
				} else {
					malformed++
				}
				a.logger.Debug("skip record without event id", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", err)
				return
			}
			h, fp := Digest(id)
			if !a.sampler.Sampled(h) {
				return
			}
			batch = append(batch, sampledRecord{id: id, fp: fp, ts: r.Timestamp.UnixMilli()})
		})
		a.observe(batch, offsets, n, malformed, reread, fetchErr)
		clear(batch) // drop references to the records
	}
}

// observe adds a polled batch to the window.
func (a *Auditor) observe(batch []sampledRecord, offsets map[topicPartition]int64, n, malformed, reread uint64, fetchErr error) {
	now := a.clock().UnixMilli()
	a.mu.Lock()
	defer a.mu.Unlock()
	start := a.started.UnixMilli()
	a.records += n
	a.malformed += malformed
	a.reread += reread
	for _, r := range batch {
		dup, in := a.win.add(r.fp, r.ts, now)
		if !in {
			continue
		}
		a.sampled++
		if dup {
			if r.ts >= start {
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
	for tp, off := range offsets {
		if off > a.consumed[tp] {
			a.consumed[tp] = off
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

func (a *Auditor) compareLoop(ctx context.Context) {
	for {
		// Until the first comparison, look every second whether the
		// window has been read, so the gauges appear soon after a start.
		wait := a.interval
		if !a.Stats().Compared {
			wait = min(wait, time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if !a.Ready() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, a.interval)
		if err := a.Compare(cctx); err != nil && ctx.Err() == nil {
			a.logger.Error("compare outbox with topics", "err", err)
		}
		cancel()
	}
}

// Compare judges the sampled rows of the window now. Before the tailer has
// read the window it judges nothing and returns nil.
func (a *Auditor) Compare(ctx context.Context) error {
	a.cmpMu.Lock()
	defer a.cmpMu.Unlock()
	if !a.Ready() {
		return nil
	}
	if a.pool == nil {
		return fmt.Errorf("compare outbox %q: no database pool", a.name)
	}
	err := a.compare(ctx)
	a.mu.Lock()
	a.cmpErr = err
	a.mu.Unlock()
	return err
}

type outboxRow struct {
	id          string
	class       Class
	publishedAt *time.Time
	createdAt   time.Time
}

// compare streams the sampled rows of the window and judges each as it
// arrives, so its memory is the findings, not the rows.
func (a *Auditor) compare(ctx context.Context) error {
	now := a.clock()
	from := now.Add(-a.cfg.Window + a.cfg.Grace)
	rows, err := a.pool.Query(ctx, a.query, from)
	if err != nil {
		return fmt.Errorf("query outbox %q: %w", a.name, err)
	}
	defer rows.Close()
	res := &result{at: now}
	var checked uint64
	firstSeen := map[string]time.Time{}
	for rows.Next() {
		var r outboxRow
		var class int32
		if err := rows.Scan(&r.id, &class, &r.publishedAt, &r.createdAt); err != nil {
			return fmt.Errorf("read outbox %q: %w", a.name, err)
		}
		r.class = Class(class)
		h, fp := Digest([]byte(r.id))
		if !a.sampler.Sampled(h) {
			continue
		}
		a.mu.Lock()
		end, onTopic := a.win.lookup(fp)
		a.mu.Unlock()
		o := Observation{ID: r.id, Class: r.class, OnTopic: onTopic}
		if onTopic {
			o.OnTopicAt = time.UnixMilli(end)
		}
		if r.class == Published {
			if r.publishedAt != nil {
				o.MarkedAt = *r.publishedAt
			} else {
				// Without published_at, a row counts as marked when this
				// process first saw it published; kept only while absent.
				o.MarkedAt = now
				if t, ok := a.firstSeen[r.id]; ok {
					o.MarkedAt = t
				}
				if !onTopic {
					firstSeen[r.id] = o.MarkedAt
				}
			}
		}
		if judged := r.createdAt.Add(a.cfg.Grace); judged.After(a.checkedUpTo) && !judged.After(now) {
			checked++
		}
		switch Judge(o, now, a.cfg.Grace) {
		case MissingInBroker:
			res.nMissing++
			if len(res.missing) < MaxFindings {
				res.missing = append(res.missing, finding(r, o))
			}
		case UnmarkedInBroker:
			res.nUnmark++
			if len(res.unmarked) < MaxFindings {
				res.unmarked = append(res.unmarked, finding(r, o))
			}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read outbox %q: %w", a.name, err)
	}
	a.firstSeen = firstSeen
	a.checkedUpTo = now
	sortFindings(res.missing)
	sortFindings(res.unmarked)
	a.mu.Lock()
	a.result = res
	a.checked += checked
	a.mu.Unlock()
	return nil
}

func finding(r outboxRow, o Observation) Finding {
	f := Finding{ID: r.id, State: r.class.String(), CreatedAt: r.createdAt.UTC()}
	if r.publishedAt != nil {
		t := r.publishedAt.UTC()
		f.PublishedAt = &t
	}
	if o.OnTopic {
		t := o.OnTopicAt.UTC()
		f.OnTopicBy = &t
	}
	return f
}

func sortFindings(fs []Finding) {
	sort.Slice(fs, func(i, j int) bool { return fs[i].ID < fs[j].ID })
}

// Stats is what the audit collector exports.
type Stats struct {
	// Compared is false until the first comparison after the window was
	// read; the finding gauges are meaningless before.
	Compared   bool
	Missing    int
	Unmarked   int
	Duplicates uint64
	Checked    uint64
	Malformed  uint64
	Records    uint64
	// SampledRecords counts records whose id was sampled, in the window.
	SampledRecords uint64
	// SampledIDs and StateBytes size the window.
	SampledIDs int
	StateBytes int
	// Err is the last comparison's or the tailer's error.
	Err error
}

// Stats returns the current counters and the last comparison's findings.
func (a *Auditor) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	ws := a.win.stats()
	s := Stats{
		Duplicates:     a.duplicates,
		Checked:        a.checked,
		Malformed:      a.malformed,
		Records:        a.records,
		SampledRecords: a.sampled,
		SampledIDs:     ws.IDs,
		StateBytes:     ws.Bytes,
		Err:            errors.Join(a.cmpErr, a.tailErr),
	}
	if a.result != nil {
		s.Compared = true
		s.Missing, s.Unmarked = a.result.nMissing, a.result.nUnmark
	}
	return s
}
