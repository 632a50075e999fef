package replicas

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/leader"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

const task = "reconcile/search_index"

// timing is the replicas' leader_election: check_interval 1s,
// retry_interval 200ms.
var timing = leader.Timing{Check: time.Second, Retry: 200 * time.Millisecond, Wait: leader.StandbyWait}

// replica is one exporter process.
type replica struct {
	name, addr string
	cfg        string // the config file's path
	cmd        *exec.Cmd
	logs       *testutil.SyncBuffer
	done       chan struct{}
	proxy      *proxy
}

// build compiles the exporter once for the test.
func build(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "outbox_exporter")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/outbox-exporter/outbox_exporter/cmd/outbox_exporter").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// fixture makes the authority, outbox and target of a reconcile job, in
// sync, and returns the two databases.
func fixture(t *testing.T) (*pgtest.DB, *pgtest.DB) {
	a, b := pgtest.New(t), pgtest.New(t)
	a.Exec(t, `CREATE TABLE messages (id bigint PRIMARY KEY, version bigint NOT NULL, created_at timestamptz NOT NULL)`)
	a.Exec(t, `CREATE TABLE outbox (event_id bigserial PRIMARY KEY, message_id bigint NOT NULL, message_version bigint NOT NULL,
		created_at timestamptz NOT NULL, status text NOT NULL, published_at timestamptz)`)
	a.Exec(t, `CREATE INDEX ON outbox (message_id, message_version)`)
	a.Exec(t, `CREATE INDEX ON messages (created_at)`)
	b.Exec(t, `CREATE TABLE search_index (message_id bigint PRIMARY KEY, version bigint NOT NULL)`)
	a.Exec(t, `INSERT INTO messages SELECT i, 1, now() - interval '1 hour' FROM generate_series(1, 200) i`)
	a.Exec(t, `INSERT INTO outbox (message_id, message_version, created_at, status, published_at)
		SELECT i, 1, now() - interval '1 hour', 'PUBLISHED', now() - interval '1 hour' FROM generate_series(1, 200) i`)
	b.Exec(t, `INSERT INTO search_index SELECT i, 1 FROM generate_series(1, 200) i`)
	return a, b
}

func viaProxy(t *testing.T, dsn, addr string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

func configFor(mainDSN, searchDSN, extra string) string {
	return extra + fmt.Sprintf(`
databases:
  main: {dsn: %q, max_connections: 2, statement_timeout: 2s}
  search: {dsn: %q, max_connections: 2}
outboxes:
  messages:
    database: main
    table: public.outbox
    id: event_id
    created_at: created_at
    status: status
    pending: [PENDING]
    published: [PUBLISHED]
    published_at: published_at
    deadline: 5m
reconcile:
  search_index:
    schedule: "@every 1s"
    window: 24h
    grace: 2m
    authority: {database: main, table: public.messages, key: id, version: version, created_at: created_at}
    outbox: {name: messages, key: message_id, version: message_version}
    target: {database: search, table: public.search_index, key: message_id, version: version}
leader_election:
  database: main
  check_interval: 1s
  retry_interval: 200ms
`, mainDSN, searchDSN)
}

// start runs a replica whose connections to the main database go through
// a proxy of its own.
func start(t *testing.T, bin, name string, a, b *pgtest.DB, extra string) *replica {
	u, _ := url.Parse(a.URL)
	r := &replica{name: name, addr: testutil.FreeAddr(t), logs: &testutil.SyncBuffer{}, done: make(chan struct{})}
	r.proxy = newProxy(t, u.Host)
	r.cfg = filepath.Join(t.TempDir(), name+".yml")
	if err := os.WriteFile(r.cfg, []byte(configFor(viaProxy(t, a.URL, r.proxy.addr()), b.URL, extra)), 0o600); err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.Command(bin, "--config.file="+r.cfg, "--web.listen-address="+r.addr, "--log.format=json", "--log.level=info",
		"--web.enable-lifecycle")
	r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		r.kill()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, tail(r.logs.String(), 4000))
		}
	})
	return r
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

func (r *replica) kill() {
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	<-r.done
}

// leads asks the replica's /api/v1/leader whether it leads the task, and
// whom it names.
func (r *replica) leads() (bool, string) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + r.addr + "/api/v1/leader")
	if err != nil {
		return false, ""
	}
	defer resp.Body.Close()
	var body struct{ Tasks []leader.Status }
	if json.NewDecoder(resp.Body).Decode(&body) != nil {
		return false, ""
	}
	for _, s := range body.Tasks {
		if s.Task == task {
			return s.Leading, s.Leader
		}
	}
	return false, ""
}

// event is one line of a replica's JSON log.
type event struct {
	Time      time.Time `json:"time"`
	Msg       string    `json:"msg"`
	Task      string    `json:"task"`
	Reconcile string    `json:"reconcile"`
}

func (r *replica) events() []event {
	var out []event
	sc := bufio.NewScanner(strings.NewReader(r.logs.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// runs counts the replica's completed reconcile runs.
func (r *replica) runs() int {
	n := 0
	for _, e := range r.events() {
		if e.Msg == "reconcile run completed" {
			n++
		}
	}
	return n
}

func waitUntil(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(testutil.HangLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, testutil.HangLimit)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// theLeader waits until exactly one live replica leads the task and the
// others name it, and returns it.
func theLeader(t *testing.T, rs []*replica) *replica {
	t.Helper()
	var got *replica
	waitUntil(t, "one replica leads "+task, func() bool {
		got = nil
		var names []string
		for _, r := range rs {
			ok, who := r.leads()
			if ok {
				if got != nil {
					return false
				}
				got = r
			} else {
				names = append(names, who)
			}
		}
		if got == nil {
			return false
		}
		for _, n := range names {
			if !strings.HasSuffix(n, got.addr[strings.LastIndex(got.addr, ":"):]) {
				return false
			}
		}
		return true
	})
	return got
}

func without(rs []*replica, x *replica) []*replica {
	var out []*replica
	for _, r := range rs {
		if r != x {
			out = append(out, r)
		}
	}
	return out
}

// terms reads every replica's terms of the task from its log; a term
// without an end ends at its replica's kill (killed) or is open.
type termSpan struct {
	replica    string
	start, end time.Time
}

func terms(rs []*replica, killed map[string]time.Time) []termSpan {
	var out []termSpan
	for _, r := range rs {
		var open *termSpan
		for _, e := range r.events() {
			switch {
			case e.Msg == "leader election: leading" && e.Task == task:
				open = &termSpan{replica: r.name, start: e.Time}
			case e.Msg == "leader election: no longer leading" && e.Task == task && open != nil:
				open.end = e.Time
				out = append(out, *open)
				open = nil
			}
		}
		if open != nil {
			open.end = killed[r.name]
			if open.end.IsZero() {
				open.end = time.Now()
			}
			out = append(out, *open)
		}
	}
	return out
}

func overlap(ts []termSpan) string {
	for i, a := range ts {
		for _, b := range ts[i+1:] {
			if a.start.Before(b.end) && b.start.Before(a.end) {
				return fmt.Sprintf("%s [%s, %s] and %s [%s, %s]", a.replica, a.start.Format(time.StampMilli), a.end.Format(time.StampMilli),
					b.replica, b.start.Format(time.StampMilli), b.end.Format(time.StampMilli))
			}
		}
	}
	return ""
}

// get returns the status and body of a GET on the replica.
func (r *replica) get(t *testing.T, path string) (int, string, http.Header) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + r.addr + path)
	if err != nil {
		t.Fatalf("GET %s on %s: %v", path, r.name, err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		sb.WriteString(sc.Text() + "\n")
	}
	return resp.StatusCode, sb.String(), resp.Header
}

// checkExports: the leader exports the job's findings and leader 1; a
// standby exports no findings, leader 0, and its findings API names the
// leader.
func checkExports(t *testing.T, l *replica, standbys []*replica) {
	t.Helper()
	_, m, _ := l.get(t, "/metrics")
	for _, want := range []string{`outbox_exporter_leader{task="` + task + `"} 1`, `outbox_reconcile_gaps{kind="missing_target",reconcile="search_index"} 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("leader %s does not export %s", l.name, want)
		}
	}
	for _, r := range standbys {
		_, m, _ := r.get(t, "/metrics")
		if !strings.Contains(m, `outbox_exporter_leader{task="`+task+`"} 0`) {
			t.Errorf("standby %s does not export leader 0", r.name)
		}
		if strings.Contains(m, "outbox_reconcile_gaps{") {
			t.Errorf("standby %s exports reconcile findings", r.name)
		}
		if !strings.Contains(m, `outbox_publish_latency_seconds_count{outbox="messages"}`) {
			t.Errorf("standby %s exports no outbox metrics", r.name)
		}
		if _, page, _ := r.get(t, "/"); !strings.Contains(page, `data-task="`+task+`" data-leading="false"`) || !strings.Contains(page, l.addr[strings.LastIndex(l.addr, ":"):]+"</td>") {
			t.Errorf("standby %s: the page does not say who leads %s", r.name, task)
		}
		code, body, h := r.get(t, "/api/v1/reconcile?job=search_index")
		if code != http.StatusConflict || !strings.Contains(body, l.addr[strings.LastIndex(l.addr, ":"):]) || h.Get("Outbox-Exporter-Leader") == "" {
			t.Errorf("standby %s: /api/v1/reconcile answered %d %q, want 409 naming %s", r.name, code, body, l.addr)
		}
	}
	if code, body, _ := l.get(t, "/api/v1/reconcile?job=search_index"); code != http.StatusOK {
		t.Errorf("leader %s: /api/v1/reconcile answered %d %q", l.name, code, body)
	}
}

// leadsTask asks /api/v1/leader whether the replica leads task.
func (r *replica) leadsTask(task string) bool {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + r.addr + "/api/v1/leader")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var body struct{ Tasks []leader.Status }
	if json.NewDecoder(resp.Body).Decode(&body) != nil {
		return false
	}
	for _, s := range body.Tasks {
		if s.Task == task {
			return s.Leading
		}
	}
	return false
}

// count is how many lines of the replica's log have message msg.
func (r *replica) count(msg string) int {
	n := 0
	for _, e := range r.events() {
		if e.Msg == msg {
			n++
		}
	}
	return n
}
