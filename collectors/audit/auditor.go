package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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
	kafka    *config.Kafka
	pool     *pgxpool.Pool
	logger   *slog.Logger
	extract  Extractor
	sampler  Sampler
	query    string
	client   *kgo.Client
	interval time.Duration
	now      atomic.Pointer[func() time.Time]
	// manual: Start runs no comparison loop; the caller compares (tests
	// that drive the clock).
	manual bool

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	started    time.Time
	fromMs     int64 // started − window: where the tailer starts reading
	win        *window
	records    uint64
	sampled    uint64
	malformed  uint64 // records from Start on
	reread     uint64 // malformed records older than Start
	duplicates uint64
	dups       map[string]*Duplicate
	dupsOver   int
	parts      map[topicPartition]*partState
	firstTS    map[topicPartition]int64 // first record's timestamp per partition
	need       map[topicPartition]int64 // end offsets at start; nil until listed
	recent     [recentIDs]recentID      // ring of recent sampled ids
	recentNext int
	ready      bool
	tailErr    error
	result     *result
	cmpErr     error
	checked    uint64
	order      *orderTracker // order.go; nil without aggregate and sequence

	cmpMu       sync.Mutex // one comparison at a time; guards the fields below
	checkedUpTo time.Time
	firstSeen   map[string]time.Time
	mismatchLog string // the id mismatch last logged
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
	span     time.Duration // the window judged: at minus the coverage start
	missing  []Finding
	unmarked []Finding
	dead     []Finding
	nMissing int
	nUnmark  int
	nDead    int
	// mismatch, when set, names an id-format mismatch that makes the
	// missing count meaningless (see mismatch.go).
	mismatch string
	match    matchStats
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
	// Report bad Kafka settings now; Start makes the tailer's client,
	// positioned by the clock at that moment. The options are only
	// validated: a client built with ConsumeTopics starts fetching at
	// once, and closing it mid-fetch races inside kgo.
	opts, err := kafkaclient.Opts(k)
	if err != nil {
		return nil, fmt.Errorf("audit %q: %w", name, err)
	}
	if err := kgo.ValidateOpts(append(opts, ConsumerOpts(a, time.Now())...)...); err != nil {
		return nil, fmt.Errorf("audit %q: kafka client: %w", name, err)
	}
	ord, err := newOrderTracker(a)
	if err != nil {
		return nil, fmt.Errorf("audit %q: %w", name, err)
	}
	s := NewSampler(a.Sample)
	au := &Auditor{
		name:     name,
		cfg:      *a,
		kafka:    k,
		pool:     pool,
		logger:   logger.With("audit", name),
		extract:  ext,
		sampler:  s,
		query:    outboxQuery(o, s),
		interval: DefaultCompareInterval,
		order:    ord,
	}
	au.setClock(time.Now)
	au.reset(time.Now())
	// What the audit cannot see with this outbox (check says the same).
	switch {
	case o.Style() == config.StyleDeleteOnPublish:
		au.logger.Warn("the outbox deletes published rows: silent loss cannot be seen, only lost acknowledgements and duplicates")
	case o.PublishedAt == "":
		au.logger.Warn("no published_at column: published rows are chosen by created_at, so a backlog row older than the window is not judged")
	}
	return au, nil
}

// reset empties the tailer's state for a start at now. Call before the
// goroutines run.
func (a *Auditor) reset(now time.Time) {
	a.started = now
	a.fromMs = now.Add(-a.cfg.Window).UnixMilli()
	if a.win != nil {
		a.win.free()
	}
	a.win = newWindow(a.cfg.Window.Milliseconds(), now.UnixMilli())
	a.dups = map[string]*Duplicate{}
	a.parts = map[topicPartition]*partState{}
	a.firstTS = map[topicPartition]int64{}
	a.need = nil
	a.ready = false
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
	a.reset(now)
	cl, err := kafkaclient.New(a.kafka, ConsumerOpts(&a.cfg, now)...)
	if err != nil {
		a.tailErr = fmt.Errorf("start tailer: %w", err)
		a.mu.Unlock()
		return
	}
	a.client = cl
	a.mu.Unlock()
	a.cmpMu.Lock()
	a.checkedUpTo = now
	a.cmpMu.Unlock()
	a.wg.Add(2)
	go func() { defer a.wg.Done(); a.listTargets(ctx) }()
	go func() { defer a.wg.Done(); a.tail(ctx) }()
	if !a.manual {
		a.wg.Add(1)
		go func() { defer a.wg.Done(); a.compareLoop(ctx) }()
	}
}

// Stop ends what Start began and closes its Kafka client, keeping the
// state for the report; Start may be called again, and then re-reads the
// window the topics still hold (a replica that leads the audit again after
// another led it).
func (a *Auditor) Stop() {
	if a.cancel != nil {
		a.cancel()
	}
	a.wg.Wait()
	a.mu.Lock()
	cl := a.client
	a.client = nil
	a.mu.Unlock()
	if cl != nil {
		cl.Close()
	}
}

// Close stops the auditor and frees its state.
func (a *Auditor) Close() {
	if a.cancel != nil {
		a.cancel()
	}
	a.wg.Wait()
	if a.client != nil {
		a.client.Close()
	}
	a.mu.Lock()
	a.win.free()
	a.mu.Unlock()
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

// Stats is what the audit collector exports.
type Stats struct {
	// Compared is false until the first comparison after the window was
	// read; the finding gauges are meaningless before.
	Compared bool
	Missing  int
	Unmarked int
	// Dead counts sampled dead rows whose id is on the topics.
	Dead int
	// Span is the window the last comparison judged (see coverage.go).
	Span time.Duration
	// Mismatch names an id-format mismatch found by the last comparison;
	// while set, Missing is not a count of lost events.
	Mismatch   string
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
		s.Missing, s.Unmarked, s.Dead = a.result.nMissing, a.result.nUnmark, a.result.nDead
		s.Span, s.Mismatch = a.result.span, a.result.mismatch
	}
	return s
}
