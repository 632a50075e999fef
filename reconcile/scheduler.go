// Package reconcile compares the authoritative table of an outbox pipeline
// with its outbox and with the derived target (a search index), on a
// schedule, and reports the losses no queue metric can see: committed rows
// without an outbox row, published events missing from the target, stale
// target versions and orphaned target rows.
//
// A run walks the authority's key space (a full sweep) or the key range of
// the rows created within the window (a windowed run) in chunks sized to
// chunk_time. A run over integer or uuid keys first compares summaries:
// each side counts and sums a 64-bit hash of (key, version) over buckets
// of about a thousand keys' rows, on its own server, and only buckets
// whose summaries differ are read row by row (checksum.go).
// Otherwise, and for the differing buckets, a chunk reads the authority
// joined with the outbox in one merge-join query, and the target's same
// key range from its own database, concurrently; the two sorted streams
// are merged in Go, every key that looks like a gap is read again by point
// look-up, and only gaps that still hold are reported. Only key, version,
// created_at and outbox state columns are selected: no message body is
// ever read.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/robfig/cron/v3"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// ErrUnknownJob is returned for a job name the configuration lacks.
var ErrUnknownJob = errors.New("unknown reconcile job")

// ErrBusy is returned by Run while a run of the same job is in progress.
var ErrBusy = errBusy

// Scheduler runs the configured reconcile jobs on their schedules and
// keeps each job's last result. One run of a job at a time: a run due
// while another of the same job is in progress is skipped and logged.
// A config reload changes its jobs in place (Prepare), keeping the state
// of every unchanged job.
type Scheduler struct {
	logger *slog.Logger
	opts   []Option
	cron   *cron.Cron

	// jobsMu guards names and jobs, which a reload replaces while scrapes,
	// the API and runs read them.
	jobsMu sync.RWMutex
	names  []string
	jobs   map[string]*jobState
	// reloadMu makes reloads one at a time.
	reloadMu sync.Mutex

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// gate, when set, says whether this replica leads a job (SetGate).
	gate atomic.Pointer[Gate]
	// started guards Start/Stop.
	mu      sync.Mutex
	started bool
}

type jobState struct {
	plan *plan
	// deps is what the job reads from the config (jobDeps): a reload
	// keeps the job when they compare equal.
	deps []any
	// specs are the job's schedule and full_sweep, parsed; entries are
	// their places in the cron once scheduled.
	specs   []jobSpec
	entries []cron.EntryID
	// ctx ends the job's runs when a reload removes or changes the job;
	// runs counts them, so that the reload waits for them to end.
	ctx    context.Context
	cancel context.CancelFunc
	runs   sync.WaitGroup

	running atomic.Bool
	// started is the Unix time in nanoseconds the run in progress
	// started at, 0 when none.
	started atomic.Int64

	mu sync.Mutex
	// removed: a reload dropped the job; no run of it starts any more.
	removed bool
	last    *Result // the last run, completed or failed
	lastOK  *Result // the last completed run
	// held are the findings no column dates, by when they were first
	// seen, kept from one completed run to the next (confirm.go).
	held map[heldID]time.Time
	// confirmInRun makes each run confirm such findings itself, as inRun
	// says.
	confirmInRun bool
	inRun        inRunRules
	// clock is what runs measure the persistence of held findings by;
	// nil: the wall clock.
	clock func() time.Time

	// Chunk sizing and a test hook, fixed at construction; tests lower them.
	minRows, maxRows, initRows int
	hooks                      hooks
	stream                     bool
	leafRows                   int
}

// Option adjusts a Scheduler.
type Option func(*Scheduler)

// StreamRuns makes runs over integer and uuid keys stream every row of
// both sides and merge them, as runs over text keys always do, instead of
// comparing range summaries (checksum.go).
// Streaming reads every row; on 10M rows with 100 gaps it took about
// twice the time and several times the servers' CPU (bench/reconcile.md).
// It is kept for comparison and for tests of both paths.
func StreamRuns() Option {
	return func(s *Scheduler) {
		for _, js := range s.jobs {
			js.stream = true
		}
	}
}

// ConfirmInRun makes each run confirm the findings no column dates by
// itself: it waits until grace has passed since it saw each and reads it
// again, instead of reporting it from a later run. For one-off runs (the
// reconcile command), which have no later run; such a run lasts at least
// grace when it holds any.
func ConfirmInRun() Option {
	return func(s *Scheduler) {
		for _, js := range s.jobs {
			js.confirmInRun = true
		}
	}
}

// ReportUnconfirmed makes a one-off run (ConfirmInRun) report the
// findings no column dates at once, each marked unconfirmed, instead of
// holding them until grace has passed: for a person who cannot wait.
func ReportUnconfirmed() Option {
	return func(s *Scheduler) {
		for _, js := range s.jobs {
			js.inRun.atOnce = true
		}
	}
}

// OnHold has a one-off run (ConfirmInRun) call notice when it starts to
// hold findings no column dates, before it waits for grace.
func OnHold(notice func(HoldNotice)) Option {
	return func(s *Scheduler) {
		for _, js := range s.jobs {
			js.inRun.onHold = notice
		}
	}
}

// HeldClock sets the clock runs measure the persistence of undated
// findings by, instead of the wall clock: for simulations and benchmarks,
// which stand for runs grace apart without waiting for grace.
func HeldClock(now func() time.Time) Option {
	return func(s *Scheduler) {
		for _, js := range s.jobs {
			js.clock = now
		}
	}
}

// New builds a Scheduler for cfg.Reconcile. pools are the exporter's
// read-only pools by database name, shared with the collectors: a run
// uses at most one session of each database at a time for each side.
// New does not connect; Start schedules the runs.
func New(cfg *config.Config, pools map[string]*pgxpool.Pool, logger *slog.Logger, opts ...Option) (*Scheduler, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Scheduler{logger: logger, jobs: map[string]*jobState{}, opts: opts}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.cron = cron.New(cron.WithParser(config.CronParser))
	for name := range cfg.Reconcile {
		js, err := s.newJob(name, cfg, pools)
		if err != nil {
			return nil, err
		}
		s.jobs[name] = js
		s.names = append(s.names, name)
	}
	sort.Strings(s.names)
	for _, o := range opts {
		o(s)
	}
	for _, name := range s.names {
		s.schedule(name, s.jobs[name])
	}
	return s, nil
}

// newJob builds job name's state, unscheduled: its plan, and its
// schedules parsed (so that a bad one fails here, not half-way through
// applying a reload).
func (s *Scheduler) newJob(name string, cfg *config.Config, pools map[string]*pgxpool.Pool) (*jobState, error) {
	job := cfg.Reconcile[name]
	p, err := newPlan(name, job, cfg, pools)
	if err != nil {
		return nil, err
	}
	js := &jobState{plan: p, deps: jobDeps(cfg, name), minRows: minChunkRows, maxRows: maxChunkRows,
		initRows: initialChunkRows, leafRows: defaultLeafRows}
	js.ctx, js.cancel = context.WithCancel(context.Background())
	sched, err := config.CronParser.Parse(job.Schedule)
	if err != nil {
		return nil, fmt.Errorf("reconcile job %s: schedule %q: %w", name, job.Schedule, err)
	}
	js.specs = append(js.specs, jobSpec{sched: sched})
	if job.FullSweep != "" {
		sched, err := config.CronParser.Parse(job.FullSweep)
		if err != nil {
			return nil, fmt.Errorf("reconcile job %s: full_sweep %q: %w", name, job.FullSweep, err)
		}
		js.specs = append(js.specs, jobSpec{sched: sched, full: true})
	}
	return js, nil
}

// jobSpec is one schedule of a job: its windowed runs, or its full
// sweeps.
type jobSpec struct {
	sched cron.Schedule
	full  bool
}

// schedule adds js's schedules to the cron.
func (s *Scheduler) schedule(name string, js *jobState) {
	for _, sp := range js.specs {
		js.entries = append(js.entries, s.cron.Schedule(sp.sched, cron.FuncJob(s.scheduled(name, js, sp.full))))
	}
}

// job returns job name's state, nil for a job the configuration lacks.
func (s *Scheduler) job(name string) *jobState {
	s.jobsMu.RLock()
	defer s.jobsMu.RUnlock()
	return s.jobs[name]
}

// Jobs returns the job names, sorted.
func (s *Scheduler) Jobs() []string {
	s.jobsMu.RLock()
	defer s.jobsMu.RUnlock()
	return slices.Clone(s.names)
}

// Gate says whether this replica leads job: the context of its term
// (which ends when the lease is lost) and true, or false on a standby.
type Gate func(job string) (context.Context, bool)

// SetGate makes scheduled runs happen only where g says this replica
// leads the job, under the lease's context. Runs asked for by Run (the
// API, the reconcile command) are not gated. nil removes the gate.
func (s *Scheduler) SetGate(g Gate) {
	if g == nil {
		s.gate.Store(nil)
		return
	}
	s.gate.Store(&g)
}

// Start begins running the jobs on their schedules.
func (s *Scheduler) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return
	}
	s.started = true
	s.cron.Start()
}

// Stop stops scheduling, cancels runs in progress and waits for them to
// end. A stopped Scheduler cannot be started again; build a new one. (A
// config reload does not stop it: Prepare changes its jobs in place.)
func (s *Scheduler) Stop() {
	s.mu.Lock()
	if s.started {
		<-s.cron.Stop().Done()
	}
	s.started = false
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// scheduled is the cron's job for one of js's schedules. It runs js
// itself, not whatever job is named name when it fires: a reload that
// changed the job may have replaced it.
func (s *Scheduler) scheduled(name string, js *jobState, full bool) func() {
	return func() {
		kind := "windowed"
		if full {
			kind = "full"
		}
		ctx := s.ctx
		if g := s.gate.Load(); g != nil {
			lease, ok := (*g)(name)
			if !ok {
				s.logger.Debug("reconcile run left to the replica that leads it", "reconcile", name, "run", kind)
				return
			}
			// Losing the lease cancels the run; Stop still does too.
			ctx = lease
		}
		res, err := s.runJob(ctx, js, name, full)
		switch {
		case errors.Is(err, ErrUnknownJob):
			// Fired as a reload removed or replaced the job.
			s.logger.Debug("reconcile run not started: the job was reloaded", "reconcile", name, "run", kind)
		case errors.Is(err, ErrBusy):
			s.logger.Warn("reconcile run skipped: the previous run is still in progress", "reconcile", name, "run", kind)
		case err != nil:
			s.logger.Error("reconcile run failed", "reconcile", name, "run", kind, "err", err)
		default:
			s.logger.Info("reconcile run completed", "reconcile", name, "run", kind,
				"rows_checked", res.RowsChecked, "gaps", res.TotalGaps(), "duration", time.Duration(res.Duration*float64(time.Second)))
		}
	}
}

// Run runs job now, a full sweep if full, else over its window, and
// records the result as the job's last. It returns ErrBusy (and no result)
// if a run of job is in progress, ErrUnknownJob for a name the
// configuration lacks, and for a failed run the result (with Error set)
// together with the error.
func (s *Scheduler) Run(ctx context.Context, job string, full bool) (*Result, error) {
	js := s.job(job)
	if js == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownJob, job)
	}
	return s.runJob(ctx, js, job, full)
}

func (s *Scheduler) runJob(ctx context.Context, js *jobState, job string, full bool) (*Result, error) {
	js.mu.Lock()
	if js.removed {
		js.mu.Unlock()
		return nil, fmt.Errorf("%w %q (removed by a reload)", ErrUnknownJob, job)
	}
	// Counted under mu, so that a reload removing the job (which sets
	// removed under mu, then waits) waits for this run too.
	js.runs.Add(1)
	js.mu.Unlock()
	defer js.runs.Done()
	if !js.running.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("reconcile %s: %w", job, ErrBusy)
	}
	s.wg.Add(1)
	defer s.wg.Done()
	defer js.running.Store(false)
	// Stop cancels runs in progress, whoever started them; a reload that
	// removes or changes the job cancels its run.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	stopJob := context.AfterFunc(js.ctx, cancel)
	defer stopJob()

	timeout := js.plan.job.Timeout
	if timeout <= 0 {
		timeout = config.DefaultReconcileTimeout
	}
	// A run that never ends would show nothing but an ageing timestamp;
	// running_seconds shows it, the timeout ends it as a failure.
	ctx, cancelRun := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("the run took longer than its timeout of %s", timeout))
	defer cancelRun()

	res := newResult(job, full)
	js.started.Store(res.Started.UnixNano())
	defer js.started.Store(0)
	r := js.runner(res, full, s.logger)
	err := r.run(ctx)
	if cause := context.Cause(ctx); err != nil && cause != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%w (%w)", cause, err)
	}
	res.Finished = time.Now()
	res.Duration = res.Finished.Sub(res.Started).Seconds()
	if err != nil {
		err = fmt.Errorf("reconcile %s: %w", job, err)
		res.Error = err.Error()
	}
	js.mu.Lock()
	js.last = res
	if err == nil {
		js.lastOK = res
		js.held = r.nextHeld()
	}
	js.mu.Unlock()
	return res, err
}

// runner is a run of js recording into res, from what js holds.
func (js *jobState) runner(res *Result, full bool, logger *slog.Logger) *runner {
	r := &runner{
		p:         js.plan,
		w:         &window{full: full},
		res:       res,
		max:       js.plan.job.MaxFindings,
		chunkRows: js.initRows,
		minRows:   js.minRows,
		maxRows:   js.maxRows,
		chunkTime: js.plan.job.ChunkTime,
		hooks:     js.hooks,
		stream:    js.stream,
		leafRows:  js.leafRows,
		logger:    logger,
	}
	js.mu.Lock()
	r.prior, r.confirmInRun, r.inRun, r.clock = js.held, js.confirmInRun, js.inRun, js.clock
	js.mu.Unlock()
	if r.chunkTime <= 0 {
		r.chunkTime = config.DefaultChunkTime
	}
	if r.max <= 0 {
		r.max = config.DefaultMaxFindings
	}
	return r
}

// Last returns the job's last run, completed or failed; nil before the
// first run ends or for an unknown job.
func (s *Scheduler) Last(job string) *Result {
	js := s.job(job)
	if js == nil {
		return nil
	}
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.last
}

// state returns the job's last run and last completed run.
func (s *Scheduler) state(job string) (last, lastOK *Result) {
	js := s.job(job)
	if js == nil {
		return nil, nil
	}
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.last, js.lastOK
}

// running is how long the job's run in progress has been running; 0 when
// none is.
func (s *Scheduler) running(job string) time.Duration {
	js := s.job(job)
	if js == nil {
		return 0
	}
	t := js.started.Load()
	if t == 0 {
		return 0
	}
	return max(0, time.Since(time.Unix(0, t)))
}
