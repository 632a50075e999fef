package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/reconcile"
)

// outcome is what one mode measured, in its own process so that its peak
// resident set is its own.
type outcome struct {
	Mode        string           `json:"mode"`
	Seconds     float64          `json:"seconds"`
	PeakRSSMB   float64          `json:"peak_rss_mb"`
	CPUSeconds  float64          `json:"cpu_seconds"`
	PGCPU       float64          `json:"pg_cpu_seconds"`
	RowsChecked int64            `json:"rows_checked"`
	Chunks      int              `json:"chunks"`
	RowsRead    int64            `json:"rows_read"`
	Gaps        map[string]int64 `json:"gaps"`
	Found       int              `json:"found"`    // injected gaps found
	Extra       int              `json:"extra"`    // findings that are not injected gaps
	Expected    int              `json:"expected"` // injected gaps in scope
	Note        string           `json:"note,omitempty"`
}

func configFor(aURL, bURL string, window, twoGrace time.Duration) (*config.Config, error) {
	y := fmt.Sprintf(`
databases:
  a: {dsn: %q, max_connections: 2, statement_timeout: 600s}
  b: {dsn: %q, max_connections: 2, statement_timeout: 600s}
outboxes:
  messages:
    database: a
    table: public.outbox
    id: event_id
    created_at: created_at
    status: status
    pending: [PENDING]
    published: [PUBLISHED]
    published_at: published_at
    deadline: 5m
reconcile:
  bench:
    schedule: "@every 1h"
    window: %s
    grace: 2m
    authority: {database: a, table: public.messages, key: id, version: version, created_at: created_at}
    outbox: {name: messages, key: message_id, version: message_version}
    target: {database: b, table: public.search_index, key: message_id, version: version}
  twosided:
    schedule: "@every 1h"
    window: %s
    grace: %s
    authority: {database: a, table: public.messages, key: id, version: version, created_at: created_at}
    target: {database: b, table: public.search_index, key: message_id, version: version}
`, aURL, bURL, window, window, twoGrace)
	return config.Parse([]byte(y), nil)
}

func peakRSSMB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			f := strings.Fields(l)
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// gap is an injected gap: its kind and its key's ordinal.
type gap struct {
	kind    string
	ordinal int64
}

// expectedGaps is every injected gap by its key as findings render it.
func expectedGaps(keys string) map[string]gap {
	m := map[string]gap{}
	for c, kind := range gapCategories {
		for j := 0; j < perKind; j++ {
			m[keyName(keys, gapID(c, j))] = gap{kind, gapID(c, j)}
		}
	}
	return m
}

// windowFor returns a window covering the newest 1% of the rows, measured
// on the authority's clock so that a seed made earlier still works.
func windowFor(ctx context.Context, aURL string, rows int) (time.Duration, error) {
	pool, err := pgxpool.New(ctx, aURL)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	var secs float64
	err = pool.QueryRow(ctx, `SELECT extract(epoch FROM now() - created_at) FROM messages WHERE id = bench_key($1)`, int64(rows-rows/100)).Scan(&secs)
	return time.Duration(secs * float64(time.Second)), err
}

// twoSidedGrace returns a grace that holds exactly the pendingRows newest
// messages, measured on the authority's clock: the twosided job has no
// outbox to tell that they are unpublished, so they are kept out of
// judgment the way rows too young to judge are.
func twoSidedGrace(ctx context.Context, aURL string, rows int) (time.Duration, error) {
	pool, err := pgxpool.New(ctx, aURL)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	var secs float64
	// Rows are 0.864 s apart: half a step younger than the newest judged
	// row, and 5 minutes more, so that the pending rows stay within grace
	// through the priming run and the timed one (the ~350 rows that adds
	// to grace hold no injected gap: the newest is 98,000 rows older).
	err = pool.QueryRow(ctx, `SELECT extract(epoch FROM now() - created_at) - 0.432 + 300 FROM messages WHERE id = bench_key($1)`, int64(rows-pendingRows)).Scan(&secs)
	return time.Duration(secs * float64(time.Second)), err
}

// heapOnly makes a database URL's sessions plan without index-only scans:
// the sweep as it ran before the bench tables had covering indexes.
func heapOnly(u string) string {
	if strings.Contains(u, "?") {
		return u + "&enable_indexonlyscan=off"
	}
	return u + "?enable_indexonlyscan=off"
}

// openPool opens a pool as the exporter does (pg.PoolConfig); buffered
// makes each session read the server's messages through a 256 KiB buffer,
// where pgx reads at most 8 KiB a call: a sweep receives hundreds of MB.
func openPool(ctx context.Context, db *config.Database, buffered bool) (*pgxpool.Pool, error) {
	pc, err := pg.PoolConfig(db)
	if err != nil {
		return nil, err
	}
	if buffered {
		pc.ConnConfig.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
			return pgproto3.NewFrontend(bufio.NewReaderSize(r, 256<<10), w)
		}
	}
	return pgxpool.NewWithConfig(ctx, pc)
}

// modeConfig is the configuration a mode runs with.
func modeConfig(ctx context.Context, mode, aURL, bURL string, rows int, window, twoGrace time.Duration) (*config.Config, error) {
	if strings.HasPrefix(mode, "window") {
		// Measured just before the run, as time moves the newest 1%.
		w, err := windowFor(ctx, aURL, rows)
		if err != nil {
			return nil, fmt.Errorf("find the newest 1%%: %w", err)
		}
		window = w
	}
	if strings.HasPrefix(mode, "twosided") {
		// Measured just before the run: each 0.864 s another pending row
		// would age out of a grace measured earlier.
		g, err := twoSidedGrace(ctx, aURL, rows)
		if err != nil {
			return nil, fmt.Errorf("find the pending rows' age: %w", err)
		}
		twoGrace = g
	}
	return configFor(aURL, bURL, window, twoGrace)
}

// child runs one mode and prints its outcome as JSON.
func child(ctx context.Context, mode, aURL, bURL string, rows int, keys string, window, twoGrace time.Duration) error {
	// A -bufio suffix reads each session through a 256 KiB buffer (see
	// openPool); a -heap suffix plans without index-only scans.
	bufferedReads := strings.HasSuffix(mode, "-bufio")
	mode = strings.TrimSuffix(mode, "-bufio")
	if strings.HasSuffix(mode, "-heap") {
		aURL, bURL = heapOnly(aURL), heapOnly(bURL)
	}
	cfg, err := modeConfig(ctx, mode, aURL, bURL, rows, window, twoGrace)
	if err != nil {
		return err
	}
	pools, err := connectPools(ctx, cfg, bufferedReads)
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	if err != nil {
		return err
	}
	out := outcome{Mode: mode}
	if bufferedReads {
		out.Mode += "-bufio"
		out.Note = "each session reads the server through a 256 KiB buffer instead of pgx's 8 KiB reads"
	}
	exp := expectedGaps(keys)
	var findings []reconcile.Finding
	// scope says whether the gap at an ordinal is in the mode's scope.
	var scope func(g gap) bool
	t := time.Now()
	cpu0 := cpuSeconds()
	pg0 := backendCPU(ctx, pools)
	switch mode {
	case "sweep", "sweep-heap", "sweep-stream", "sweep-stream-heap", "window", "twosided", "twosided-heap", "twosided-stream", "twosided-stream-heap", "window-stream":
		var res *reconcile.Result
		res, scope, err = scheduledRun(ctx, mode, cfg, pools, rows, func() {
			t, cpu0, pg0 = time.Now(), cpuSeconds(), backendCPU(ctx, pools)
		})
		if err != nil {
			return err
		}
		out.RowsChecked, out.Chunks, out.RowsRead, findings = res.RowsChecked, res.Chunks, res.RowsRead, res.Findings
		out.Gaps = map[string]int64{}
		for k, v := range res.Gaps {
			out.Gaps[string(k)] = v
		}
	case "maps":
		if keys != "bigint" {
			return fmt.Errorf("mode maps reads bigint keys only")
		}
		out.RowsRead = int64(rows)*2 - pendingRows
		findings, out.RowsChecked, err = naiveMaps(ctx, pools["a"], pools["b"])
		if err != nil {
			return err
		}
		out.Note = "both sides loaded into Go maps, no re-check"
	case "checksum":
		out.RowsChecked, err = checksumBoth(ctx, pools["a"], pools["b"], keys)
		if err != nil {
			return err
		}
		out.Note = "count and sum of the (key, version) hash of both sides whole, concurrently: the floor of any summary comparison"
	case "mergeplan", "hashplan":
		out.RowsChecked, err = joinWhole(ctx, pools["a"], mode == "mergeplan")
		if err != nil {
			return err
		}
		out.Note = "authority LEFT JOIN outbox over the whole table in one query, rows counted on the server"
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	out.Seconds = time.Since(t).Seconds()
	out.PeakRSSMB = peakRSSMB()
	out.CPUSeconds = cpuSeconds() - cpu0
	out.PGCPU = backendCPU(ctx, pools) - pg0
	tally(&out, exp, findings, scope, mode)
	return json.NewEncoder(os.Stdout).Encode(out)
}

// tally counts the injected gaps in scope, and the findings that are one
// of them or not.
func tally(out *outcome, exp map[string]gap, findings []reconcile.Finding, scope func(gap) bool, mode string) {
	for _, g := range exp {
		if scope == nil || scope(g) {
			out.Expected++
		}
	}
	if findings == nil && mode != "maps" && out.Gaps == nil {
		out.Expected = 0
	}
	for _, f := range findings {
		if g, ok := exp[f.Key]; ok && g.kind == string(f.Kind) && (scope == nil || scope(g)) {
			out.Found++
		} else {
			out.Extra++
		}
	}
}

// connectPools opens the config's pools and connects each one's sessions:
// the exporter's pools stay open between runs, so a run is timed, not
// the connections.
func connectPools(ctx context.Context, cfg *config.Config, bufferedReads bool) (map[string]*pgxpool.Pool, error) {
	pools := map[string]*pgxpool.Pool{}
	for name, db := range cfg.Databases {
		p, err := openPool(ctx, db, bufferedReads)
		if err != nil {
			return pools, err
		}
		pools[name] = p
		conns := make([]*pgxpool.Conn, 0, db.MaxConnections)
		for range db.MaxConnections {
			c, err := p.Acquire(ctx)
			if err != nil {
				return pools, fmt.Errorf("connect %s: %w", name, err)
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			c.Release()
		}
	}
	return pools, nil
}

func measure(ctx context.Context, aURL, bURL string, rows int, keys string, modes []string, repeat int) error {
	window, err := windowFor(ctx, aURL, rows)
	if err != nil {
		return fmt.Errorf("find the newest 1%%: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var outs []outcome
	// Each round runs every mode once, so that repeated figures of one
	// mode are spread over the run's changing load.
	var order []string
	for range repeat {
		order = append(order, modes...)
	}
	for _, mode := range order {
		cmd := exec.CommandContext(ctx, self, "-child", mode, "-a", aURL, "-b", bURL, "-rows", fmt.Sprint(rows), "-keys", keys, "-window", window.String())
		cmd.Stderr = os.Stderr
		b, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("mode %s: %w", mode, err)
		}
		var o outcome
		if err := json.Unmarshal(b, &o); err != nil {
			return fmt.Errorf("mode %s: %w", mode, err)
		}
		logf("%s: %.2fs %.0f MB", mode, o.Seconds, o.PeakRSSMB)
		outs = append(outs, o)
	}
	printTable(outs, rows, keys)
	return nil
}

// defaultModes are the modes a run measures unless -modes says otherwise;
// the first is the baseline of the ratios.
var defaultModes = "sweep-stream,sweep,sweep-heap,twosided-stream,twosided,window-stream,window,maps,checksum,mergeplan"

func printTable(outs []outcome, rows int, keys string) {
	base := outs[0]
	fmt.Printf("reconcile, %s keys, %d authority rows (+ outbox) vs a %d-row target in another database, 100 injected gaps; ratios against the first %s\n\n", keys, rows, rows-pendingRows, base.Mode)
	fmt.Printf("| mode | seconds | vs base | exporter CPU s | server CPU s | peak RSS MB | vs base | rows checked | rows read | chunks | injected found / in scope | other findings |\n")
	fmt.Printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, o := range outs {
		found := fmt.Sprintf("%d / %d", o.Found, o.Expected)
		if o.Gaps == nil && o.Mode != "maps" {
			found = "-"
		}
		fmt.Printf("| %s | %.2f | %.2fx | %.1f | %.1f | %.0f | %.2fx | %d | %d | %d | %s | %d |\n",
			o.Mode, o.Seconds, o.Seconds/base.Seconds, o.CPUSeconds, o.PGCPU, o.PeakRSSMB, o.PeakRSSMB/base.PeakRSSMB, o.RowsChecked, o.RowsRead, o.Chunks, found, o.Extra)
	}
	fmt.Println()
	noted := map[string]bool{}
	for _, o := range outs {
		if o.Note != "" && !noted[o.Mode] {
			noted[o.Mode] = true
			fmt.Printf("- %s: %s\n", o.Mode, o.Note)
		}
	}
}

// cpuSeconds is the user+system CPU time this process has used.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// backendCPU sums the CPU time of the server processes behind the pools'
// sessions, read from /proc: the benchmark runs beside the server. The
// pools were opened for this mode, so their sessions did nothing else.
func backendCPU(ctx context.Context, pools map[string]*pgxpool.Pool) float64 {
	tick := 100.0 // USER_HZ
	total := 0.0
	for _, pool := range pools {
		for _, c := range pool.AcquireAllIdle(ctx) {
			var pid int
			if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err == nil {
				if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
					f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
					ut, _ := strconv.ParseFloat(f[11], 64)
					st, _ := strconv.ParseFloat(f[12], 64)
					total += (ut + st) / tick
				}
			}
			c.Release()
		}
	}
	return total
}

// scheduledRun runs a mode of the Scheduler: a priming run, then the
// timed one, startClock called between them. Target rows whose authority
// row is gone are dated by no column: a scheduled run reports them when a
// run grace or more after their first sighting sees them again. The timed
// run is that later run: the priming run holds them, and the held
// findings' clock then stands a day later. scope says which injected gaps
// the mode can see.
func scheduledRun(ctx context.Context, mode string, cfg *config.Config, pools map[string]*pgxpool.Pool, rows int, startClock func()) (*reconcile.Result, func(gap) bool, error) {
	var later atomic.Bool
	clock := func() time.Time {
		if later.Load() {
			return time.Now().Add(24 * time.Hour)
		}
		return time.Now()
	}
	opts := []reconcile.Option{reconcile.HeldClock(clock)}
	if strings.Contains(mode, "-stream") {
		opts = append(opts, reconcile.StreamRuns())
	}
	s, err := reconcile.New(cfg, pools, slog.New(slog.DiscardHandler), opts...)
	if err != nil {
		return nil, nil, err
	}
	defer s.Stop()
	job := "bench"
	var scope func(gap) bool
	if strings.HasPrefix(mode, "twosided") {
		job = "twosided"
		// Without an outbox, a missing outbox row is no gap: those
		// messages are in the index.
		scope = func(g gap) bool { return g.kind != "missing_outbox" }
	}
	windowed := strings.HasPrefix(mode, "window")
	if windowed {
		lowest := int64(rows - rows/100)
		scope = func(g gap) bool { return g.ordinal >= lowest }
	}
	if _, err := s.Run(ctx, job, !windowed); err != nil {
		return nil, nil, fmt.Errorf("priming run: %w", err)
	}
	later.Store(true)
	startClock()
	res, err := s.Run(ctx, job, !windowed)
	return res, scope, err
}
