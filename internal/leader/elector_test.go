package leader

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// fast is the tests' timing: short, so that the tests end soon; the
// verdicts rest on the order of events, not on how long they took. The
// retry is much shorter than the check, so that a standby finds a freed
// lock long before the old leader's next check would notice it lost it:
// without the takeover wait the terms would overlap.
var fast = Timing{Check: time.Second, Retry: 100 * time.Millisecond}

// ledger records every term of every replica, from OnLead.
type ledger struct {
	mu    sync.Mutex
	terms []termRec
}

type termRec struct {
	replica, task string
	start, end    time.Time // end zero while the term lasts
}

func (l *ledger) watch(e *Elector, replica string) {
	for _, task := range e.Tasks() {
		e.OnLead(task, func(ctx context.Context) {
			l.mu.Lock()
			i := len(l.terms)
			l.terms = append(l.terms, termRec{replica: replica, task: task, start: time.Now()})
			l.mu.Unlock()
			<-ctx.Done()
			l.mu.Lock()
			l.terms[i].end = time.Now()
			l.mu.Unlock()
		})
	}
}

// overlaps returns two terms of one task that were open at once.
func (l *ledger) overlaps() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, a := range l.terms {
		for _, b := range l.terms[i+1:] {
			if a.task != b.task {
				continue
			}
			aEnd, bEnd := a.end, b.end
			if aEnd.IsZero() {
				aEnd = time.Now()
			}
			if bEnd.IsZero() {
				bEnd = time.Now()
			}
			if a.start.Before(bEnd) && b.start.Before(aEnd) {
				return fmt.Sprintf("%s led by %s [%v, %v] and %s [%v, %v]", a.task, a.replica, a.start, a.end, b.replica, b.start, b.end)
			}
		}
	}
	return ""
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testutil.HangLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, testutil.HangLimit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leaders returns, per task, the replicas leading it.
func leaders(es map[string]*Elector) map[string][]string {
	out := map[string][]string{}
	for _, name := range slices.Sorted(mapsKeys(es)) {
		for _, s := range es[name].Status() {
			if s.Leading {
				out[s.Task] = append(out[s.Task], name)
			}
		}
	}
	return out
}

func mapsKeys(es map[string]*Elector) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range es {
			if !yield(k) {
				return
			}
		}
	}
}

// roleDB returns a database config for a new login role without any
// privilege beyond connecting, dropped when the test ends.
func roleDB(t *testing.T, db *pgtest.DB) *config.Database {
	role := db.Name + "_r"
	db.Exec(t, fmt.Sprintf("CREATE ROLE %s LOGIN", role))
	t.Cleanup(func() {
		ctx := context.Background()
		db.Admin.Exec(ctx, fmt.Sprintf("DROP OWNED BY %s", role))
		db.Admin.Exec(ctx, fmt.Sprintf("DROP ROLE IF EXISTS %s", role))
	})
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return &config.Database{DSN: config.Secret(u.String()), MaxConnections: 1,
		StatementTimeout: 5 * time.Second, LockTimeout: time.Second}
}

func start(t *testing.T, e *Elector) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return func() { cancel(); <-done }
}

var tasks = []string{"reconcile/orders", "audit/messages", "reconcile/payments"}

// TestOneLeaderPerTask: three replicas on a role with no privilege; each
// task gets exactly one leader, the standbys name it, and when a leader
// goes (its session terminated by the server, or it shuts down) another
// takes over only after the old term ended.
func TestOneLeaderPerTask(t *testing.T) {
	db := pgtest.New(t)
	dbc := roleDB(t, db)
	var l ledger
	es := map[string]*Elector{}
	stops := map[string]context.CancelFunc{}
	for _, name := range []string{"r1", "r2", "r3"} {
		es[name] = New(tasks, PGDialer(dbc, name+":9187", fast, nil), fast, testutil.Quiet())
		l.watch(es[name], name)
		stops[name] = start(t, es[name])
	}
	allLed := func() bool {
		ls := leaders(es)
		for _, task := range tasks {
			if len(ls[task]) != 1 {
				return false
			}
		}
		return true
	}
	waitUntil(t, "every task led", allLed)
	ls := leaders(es)
	leader := ls[tasks[0]][0]
	// The standbys name the leader, read from pg_locks and
	// pg_stat_activity as the unprivileged role.
	for name, e := range es {
		for _, s := range e.Status() {
			want := ls[s.Task][0] + ":9187"
			if name == ls[s.Task][0] {
				want = "self"
			}
			waitUntil(t, name+" names the leader of "+s.Task, func() bool {
				for _, s2 := range e.Status() {
					if s2.Task == s.Task {
						return s2.Leader == want
					}
				}
				return false
			})
		}
	}

	// The server ends the leader's lease session.
	db.Exec(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", AppName(leader+":9187"))
	waitUntil(t, "another replica leads "+tasks[0], func() bool {
		ls := leaders(es)
		return len(ls[tasks[0]]) == 1 && ls[tasks[0]][0] != leader || len(ls[tasks[0]]) == 1 && termsOf(&l, tasks[0]) > 1
	})
	waitUntil(t, "every task led after the termination", allLed)

	// A leader shuts down.
	leader = leaders(es)[tasks[1]][0]
	stops[leader]()
	delete(es, leader)
	waitUntil(t, "another replica leads "+tasks[1]+" after a shutdown", allLed)

	if o := l.overlaps(); o != "" {
		t.Fatalf("two leaders at once: %s", o)
	}
	if n := termsOf(&l, tasks[1]); n < 2 {
		t.Fatalf("%s had %d terms, want a takeover", tasks[1], n)
	}
}

func termsOf(l *ledger, task string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.terms {
		if r.task == task {
			n++
		}
	}
	return n
}
