package leader

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Session is the one server session a replica holds its leases on.
type Session interface {
	// TryLock tries to take the advisory lock of each key, without
	// waiting, and reports for each whether it took it and, if not, who
	// holds it. With no keys it only checks that the session answers.
	TryLock(ctx context.Context, keys []int64) ([]Try, error)
	// Wait takes the advisory lock of key, waiting for it at most wait,
	// in one statement; it reports false when the wait ended without it.
	Wait(ctx context.Context, key int64, wait time.Duration) (bool, error)
	// Unlock releases the advisory lock of each key.
	Unlock(ctx context.Context, keys []int64) error
	Close()
}

// Try is what one try of a lock found.
type Try struct {
	Taken bool
	// Held: another session holds the lock, whose application_name is
	// Holder; false when it was freed between the try and the read.
	Held   bool
	Holder string
}

// Dialer opens a Session.
type Dialer func(ctx context.Context) (Session, error)

// Elector keeps one Session and leads the tasks whose locks it holds.
// Work that a task's leader does runs under the context of its term
// (Lease, OnLead), which ends the moment the term does.
type Elector struct {
	tasks  []string
	dial   Dialer
	timing Timing
	logger *slog.Logger
	now    func() time.Time

	sess        Session // used by Run's goroutine only
	dialFailing bool    // the last dial failed; Run's goroutine only
	// again: the last round went again at once for a lock freed during
	// its try (awaitHeld); Run's goroutine only.
	again bool

	mu       sync.Mutex
	acquired map[string]time.Time // tasks whose lock the session holds, since
	terms    map[string]*term     // tasks led
	holders  map[string]string    // who holds the tasks not led, as last read
	onLead   map[string][]func(context.Context)
	release  []int64 // locks of tasks dropped by SetTasks, to free (rebind.go)
	work     sync.WaitGroup
}

type term struct {
	ctx    context.Context
	cancel context.CancelFunc
	since  time.Time
	work   []*running // the work started in this term, still running
}

// running is one piece of work of a term, under a context of its own (a
// child of the term's) so that SetWork can replace it alone.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns an Elector for tasks that opens its session with dial.
func New(tasks []string, dial Dialer, t Timing, logger *slog.Logger) *Elector {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Elector{tasks: slices.Sorted(slices.Values(tasks)), dial: dial, timing: t, logger: logger, now: time.Now,
		acquired: map[string]time.Time{}, terms: map[string]*term{}, holders: map[string]string{},
		onLead: map[string][]func(context.Context){}}
}

// SetDialer sets how the session is opened; call before Run.
func (e *Elector) SetDialer(d Dialer) { e.dial = d }

// Tasks returns the tasks the Elector stands for, sorted.
func (e *Elector) Tasks() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.tasks)
}

// OnLead registers f to run, in a goroutine of its own, at the start of
// each term of task (at once when a term runs), with a context that ends
// with the term; f must return soon after that context ends.
func (e *Elector) OnLead(task string, f func(ctx context.Context)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.onLead[task] = append(e.onLead[task], f)
	if t := e.terms[task]; t != nil {
		e.startLocked(t, f)
	}
}

// Lease returns the context of task's current term and true while this
// replica leads task.
func (e *Elector) Lease(task string) (context.Context, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t := e.terms[task]; t != nil {
		return t.ctx, true
	}
	return nil, false
}

// Status is what a replica knows of one task's leadership.
type Status struct {
	Task    string    `json:"task"`
	Leading bool      `json:"leading"`
	Since   time.Time `json:"since,omitzero"`
	// Leader names the replica that leads: its identity as it set it in
	// its lease session's application_name; "" when no session holds the
	// task's lock (or this replica could not ask), "unknown" when the
	// holder's name is not visible to this role.
	Leader string `json:"leader,omitempty"`
}

// Status returns every task's status, sorted by task.
func (e *Elector) Status() []Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Status, 0, len(e.tasks))
	for _, task := range e.tasks {
		s := Status{Task: task, Leader: e.holders[task]}
		if t := e.terms[task]; t != nil {
			s.Leading, s.Since, s.Leader = true, t.since, "self"
		}
		out = append(out, s)
	}
	return out
}

// Run takes and keeps leases until ctx ends, then ends every term, waits
// for the work of OnLead to return and closes the session (the server
// frees its locks).
func (e *Elector) Run(ctx context.Context) {
	defer func() {
		e.lose(nil)
	}()
	for {
		holding := e.round(ctx)
		if !holding && e.awaitHeld(ctx) {
			continue
		}
		e.endTry(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(e.timing.wait(holding)):
		}
	}
}

// ender is a Session whose try may leave a transaction open for the
// wait that follows it (pgSession).
type ender interface {
	End(ctx context.Context) error
}

// endTry ends what the round's try left open before the loop pauses; a
// session that fails to is lost.
func (e *Elector) endTry(ctx context.Context) {
	s, ok := e.sess.(ender)
	if !ok {
		return
	}
	qctx, cancel := context.WithTimeout(ctx, e.timing.Check)
	defer cancel()
	if err := s.End(qctx); err != nil {
		if ctx.Err() == nil {
			e.logger.Warn("leader election: lease session lost; every task led here stopped", "err", err)
		}
		e.lose(err)
	}
}

// round is one turn of the loop: open the session if need be, try the
// locks not held (which also checks the session), begin the terms whose
// takeover has passed and read who holds the rest. It reports whether
// the session holds any lock.
func (e *Elector) round(ctx context.Context) bool {
	if e.sess == nil {
		e.mu.Lock()
		e.release = nil // no session, no lock to free
		e.mu.Unlock()
		dctx, cancel := context.WithTimeout(ctx, e.timing.Check)
		s, err := e.dial(dctx)
		cancel()
		if err != nil {
			// Logged once per outage, not at every retry.
			if ctx.Err() == nil && !e.dialFailing {
				e.logger.Warn("leader election: cannot open the lease session; standing by and retrying", "err", err, "retry", e.timing.Retry)
			}
			e.dialFailing = true
			return false
		}
		if e.dialFailing {
			e.logger.Info("leader election: lease session open again")
		}
		e.dialFailing = false
		e.sess = s
	}
	if err := e.freeDropped(ctx); err != nil {
		if ctx.Err() == nil {
			e.logger.Warn("leader election: lease session lost; every task led here stopped", "err", err)
		}
		e.lose(err)
		return false
	}
	if err := e.tryLocks(ctx); err != nil {
		if ctx.Err() == nil {
			e.logger.Warn("leader election: lease session lost; every task led here stopped", "err", err)
		}
		e.lose(err)
		return false
	}
	e.mu.Lock()
	start := due(e.acquired, e.terms, e.now(), e.timing.Takeover())
	e.mu.Unlock()
	for _, task := range start {
		e.begin(task)
	}
	return e.holding()
}

// tryLocks tries the locks of the tasks not held, which also reads who
// holds the others, in one statement; with every lock held it only checks
// the session.
func (e *Elector) tryLocks(ctx context.Context) error {
	e.mu.Lock()
	var want []string
	for _, task := range e.tasks {
		if _, ok := e.acquired[task]; !ok {
			want = append(want, task)
		}
	}
	e.mu.Unlock()
	keys := make([]int64, len(want))
	for i, task := range want {
		keys[i] = Key(task)
	}
	qctx, cancel := context.WithTimeout(ctx, e.timing.Check)
	defer cancel()
	got, err := e.sess.TryLock(qctx, keys)
	if err != nil {
		return fmt.Errorf("try %d lease(s): %w", len(keys), err)
	}
	if len(got) != len(keys) {
		return fmt.Errorf("try %d lease(s): %d answers", len(keys), len(got))
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, task := range want {
		switch {
		case !slices.Contains(e.tasks, task):
			// Dropped by SetTasks during the try.
			if got[i].Taken {
				e.release = append(e.release, Key(task))
			}
		case got[i].Taken:
			e.acquired[task] = now
			delete(e.holders, task)
			e.logger.Info("leader election: lease taken; leading after the takeover wait", "task", task, "wait", e.timing.Takeover())
		case got[i].Held:
			e.holders[task] = Identity(got[i].Holder)
		default:
			e.holders[task] = "" // freed since: the next round takes it
		}
	}
	return nil
}

// awaitHeld is what a replica that holds no lock does after its try,
// with Timing.Wait set: it waits, in one statement of at most Wait, for
// the lock of the first task another replica leads, which the server
// grants the moment that replica's session ends or frees it. It reports
// whether the next round comes at once: after the wait (a lock taken:
// that round tries the others; none: it tries all again and reads who
// leads them), or when the try found a lock freed since (once in a row).
// It reports false, for the usual pause, with nothing to wait for, no
// session, a session lost, or a wait that ended early.
func (e *Elector) awaitHeld(ctx context.Context) bool {
	if e.timing.Wait <= 0 || e.sess == nil {
		return false
	}
	e.mu.Lock()
	var task string
	freed := false
	for _, t := range e.tasks {
		if h := e.holders[t]; h == "" {
			freed = true
		} else if task == "" {
			task = t
		}
	}
	e.mu.Unlock()
	if freed || task == "" {
		again := freed && !e.again
		e.again = again
		return again
	}
	e.again = false
	start := e.now()
	qctx, cancel := context.WithTimeout(ctx, e.timing.Wait+e.timing.Check)
	got, err := e.sess.Wait(qctx, Key(task), e.timing.Wait)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			e.logger.Warn("leader election: lease session lost while waiting for a lease", "err", err)
		}
		e.lose(err)
		return false
	}
	if !got {
		return e.now().Sub(start) >= e.timing.Wait/2
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !slices.Contains(e.tasks, task) {
		e.release = append(e.release, Key(task)) // dropped by SetTasks meanwhile
		return true
	}
	e.acquired[task] = e.now()
	delete(e.holders, task)
	e.logger.Info("leader election: lease taken after waiting for it; leading after the takeover wait", "task", task, "wait", e.timing.Takeover())
	return true
}

// due returns the tasks acquired at least takeover before now that are
// not led yet, sorted: their terms begin.
func due(acquired map[string]time.Time, terms map[string]*term, now time.Time, takeover time.Duration) []string {
	var out []string
	for _, task := range slices.Sorted(maps.Keys(acquired)) {
		if terms[task] == nil && now.Sub(acquired[task]) >= takeover {
			out = append(out, task)
		}
	}
	return out
}

// begin starts a term of task and the work registered for it.
func (e *Elector) begin(task string) {
	ctx, cancel := context.WithCancel(context.Background())
	e.mu.Lock()
	defer e.mu.Unlock()
	if !slices.Contains(e.tasks, task) {
		cancel() // dropped by SetTasks meanwhile
		return
	}
	e.logger.Info("leader election: leading", "task", task)
	t := &term{ctx: ctx, cancel: cancel, since: e.now()}
	e.terms[task] = t
	for _, f := range e.onLead[task] {
		e.startLocked(t, f)
	}
}

// startLocked starts f in term t, under a context of its own; e.mu held.
func (e *Elector) startLocked(t *term, f func(context.Context)) {
	ctx, cancel := context.WithCancel(t.ctx)
	r := &running{cancel: cancel, done: make(chan struct{})}
	t.work = append(t.work, r)
	e.work.Add(1)
	go func() {
		defer e.work.Done()
		defer close(r.done)
		defer cancel()
		f(ctx)
	}()
}

func (e *Elector) holding() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.acquired) > 0
}

// lose ends every term at once, then drops the session: the work stops
// before the server can give the locks to another replica (for a session
// that is still alive; a dead one freed them already, see Timing).
func (e *Elector) lose(cause error) {
	e.mu.Lock()
	for task, t := range e.terms {
		t.cancel()
		if cause != nil {
			e.logger.Warn("leader election: no longer leading", "task", task)
		}
	}
	clear(e.terms)
	clear(e.acquired)
	e.mu.Unlock()
	if cause == nil {
		// A shutdown: the work ends before the locks are freed.
		e.work.Wait()
	}
	if e.sess != nil {
		e.sess.Close()
		e.sess = nil
	}
}

// identityPrefix starts the application_name of every lease session.
const identityPrefix = "outbox_exporter leader "

// AppName is the application_name of the lease session of the replica
// named identity; PostgreSQL keeps 63 bytes of it.
func AppName(identity string) string {
	n := identityPrefix + identity
	if len(n) > 63 {
		n = n[:63]
	}
	return n
}

// Identity reads a holder's identity back from its application_name:
// "unknown" for a session whose name this role cannot see or that is not
// a lease session of ours (a lock the exporter did not take).
func Identity(appName string) string {
	if id, ok := strings.CutPrefix(appName, identityPrefix); ok && id != "" {
		return id
	}
	return "unknown"
}
