// Command soak runs the demo pipeline with faults and the exporter on it
// for a long time, scraping like Prometheus, and checks that the
// exporter's resident memory, heap and goroutines stay flat and that it
// never holds more database sessions than its max_connections.
//
//	go run ./bench/soak -duration 30m -interval 30s
//
// The pipeline (writers, relays, consumers, kfake) runs in this process;
// the exporter runs as a child process built from ./cmd/outbox_exporter,
// so the RSS, heap and goroutines reported are the exporter's alone. The
// soak process's own figures are printed beside them for comparison.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/demo"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

func main() {
	os.Exit(run())
}

type flags struct {
	duration     time.Duration
	interval     time.Duration
	warmup       time.Duration
	scrapeEvery  time.Duration
	apiEvery     time.Duration
	faultEvery   time.Duration
	exporter     string
	dir          string
	maxConns     int
	scrapeHeader string
}

func run() int {
	var f flags
	flag.DurationVar(&f.duration, "duration", 30*time.Minute, "how long to soak")
	flag.DurationVar(&f.interval, "interval", 30*time.Second, "time between samples")
	flag.DurationVar(&f.warmup, "warmup", 5*time.Minute, "the sample at or after this is the base the end is compared with (a third of -duration if longer than it)")
	flag.DurationVar(&f.scrapeEvery, "scrape-every", 5*time.Second, "scrape interval of the Prometheus-like scraper")
	flag.DurationVar(&f.apiEvery, "api-every", 30*time.Second, "how often to GET / and the /api/v1/* endpoints")
	flag.DurationVar(&f.faultEvery, "fault-every", time.Minute, "pause between the demo's scripted faults")
	flag.StringVar(&f.exporter, "exporter", "", "outbox_exporter binary to run (default: go build ./cmd/outbox_exporter)")
	flag.StringVar(&f.dir, "dir", "", "directory for the config and the logs (default: a new temporary one, kept)")
	flag.StringVar(&f.scrapeHeader, "scrape-timeout", "10", "X-Prometheus-Scrape-Timeout-Seconds the scraper sends")
	flag.Parse()
	if f.warmup >= f.duration {
		f.warmup = f.duration / 3
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := soak(ctx, f, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	return 0
}

func soak(ctx context.Context, f flags, out io.Writer) (err error) {
	if err := prepare(ctx, &f, out); err != nil {
		return err
	}
	demoLog, err := os.Create(filepath.Join(f.dir, "demo.log"))
	if err != nil {
		return fmt.Errorf("create demo log: %w", err)
	}
	defer demoLog.Close()
	p, err := startDemo(ctx, f, demoLog, out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := p.Close(); cerr != nil {
			fmt.Fprintln(os.Stderr, "soak: close the demo:", cerr)
		}
	}()
	f.maxConns = 3 // demo.configYAML: databases.demo.max_connections
	cfgFile, err := p.WriteConfig(f.dir)
	if err != nil {
		return err
	}
	ex, err := startExporter(ctx, f, cfgFile)
	if err != nil {
		return err
	}
	defer func() {
		if werr := ex.stop(); err == nil {
			err = werr
		}
	}()
	client := &http.Client{Timeout: 15 * time.Second}
	if err := waitReady(ctx, client, ex.base, ex.exited); err != nil {
		return err
	}
	fmt.Fprintf(out, "Exporter pid %d at %s; exporter log %s.\n", ex.cmd.Process.Pid, ex.base, ex.logPath)

	conn, err := pgx.Connect(ctx, p.DatabaseURL())
	if err != nil {
		return fmt.Errorf("connect to count sessions: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	samples, err := sampleRun(ctx, f, out, ex, conn, &scraper{client: client, base: ex.base, header: f.scrapeHeader})
	if err != nil {
		return err
	}
	writeTable(out, samples)
	v, err := judge(samples, f.warmup, f.maxConns)
	if err != nil {
		return fmt.Errorf("judge: %w", err)
	}
	writeVerdict(out, v)
	errs, warns := countLogLevels(ex.logPath)
	fmt.Fprintf(out, "Exporter log: %d ERROR and %d WARN lines (%s). Demo faults injected: %d.\n", errs, warns, ex.logPath, len(p.Faults()))
	if !v.Flat {
		return errors.New("not flat")
	}
	return nil
}

// prepare makes the soak directory and builds the exporter unless f names
// them.
func prepare(ctx context.Context, f *flags, out io.Writer) (err error) {
	if f.dir == "" {
		if f.dir, err = os.MkdirTemp("", "outbox-soak-"); err != nil {
			return fmt.Errorf("make the soak directory: %w", err)
		}
	}
	fmt.Fprintf(out, "Soak directory (config, logs): %s\n", f.dir)
	if f.exporter == "" {
		f.exporter = filepath.Join(f.dir, "outbox_exporter")
		fmt.Fprintln(out, "Building ./cmd/outbox_exporter ...")
		b := exec.CommandContext(ctx, "go", "build", "-o", f.exporter, "./cmd/outbox_exporter")
		b.Stdout, b.Stderr = os.Stderr, os.Stderr
		if err := b.Run(); err != nil {
			return fmt.Errorf("build the exporter (run from the repository root): %w", err)
		}
	}
	return nil
}

// startDemo starts the demo pipeline in a database of its own, logging
// to demoLog.
func startDemo(ctx context.Context, f flags, demoLog io.Writer, out io.Writer) (*demo.Pipeline, error) {
	logger := slog.New(slog.NewTextHandler(demoLog, &slog.HandlerOptions{Level: slog.LevelWarn}))
	db := fmt.Sprintf("outbox_soak_%d_%d", os.Getpid(), time.Now().Unix()%100000)
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	p, err := demo.Start(startCtx, demo.Options{
		DatabaseURL: os.Getenv("DATABASE_URL"),
		Database:    db,
		DropOnClose: true,
		FaultEvery:  f.faultEvery,
		Out:         demoLog,
	}, logger)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("start the demo pipeline: %w", err)
	}
	fmt.Fprintf(out, "Demo database %s, faults every %s.\n", db, f.faultEvery)
	return p, nil
}

// exporterProc is the exporter running as a child process.
type exporterProc struct {
	cmd     *exec.Cmd
	base    string
	logPath string
	log     *os.File
	exited  chan error
	cancel  context.CancelFunc
}

// startExporter runs f.exporter on cfgFile at a free port, logging to
// exporter.log in f.dir.
func startExporter(ctx context.Context, f flags, cfgFile string) (*exporterProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	ex := &exporterProc{
		base:    "http://" + net.JoinHostPort("127.0.0.1", port),
		logPath: filepath.Join(f.dir, "exporter.log"),
		exited:  make(chan error, 1),
	}
	if ex.log, err = os.Create(ex.logPath); err != nil {
		return nil, fmt.Errorf("create exporter log: %w", err)
	}
	childCtx, stopChild := context.WithCancel(context.WithoutCancel(ctx))
	ex.cancel = stopChild
	child := exec.CommandContext(childCtx, f.exporter,
		"--config.file="+cfgFile, "--web.listen-address=127.0.0.1:"+port, "--log.level=info")
	child.Stdout, child.Stderr = ex.log, ex.log
	child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	child.Cancel = func() error { return child.Process.Signal(syscall.SIGTERM) }
	child.WaitDelay = 10 * time.Second
	if err := child.Start(); err != nil {
		stopChild()
		ex.log.Close()
		return nil, fmt.Errorf("start the exporter: %w", err)
	}
	ex.cmd = child
	go func() { ex.exited <- child.Wait() }()
	return ex, nil
}

// stop ends the exporter and waits for it.
func (ex *exporterProc) stop() error {
	defer ex.log.Close()
	ex.cancel()
	werr := <-ex.exited
	// Stopped by SIGTERM, the exporter shuts down and exits 0; Wait then
	// reports the cancelled context, which is no failure.
	if ex.cmd.ProcessState == nil || !ex.cmd.ProcessState.Success() {
		return fmt.Errorf("exporter exit (see %s): %v", ex.logPath, werr)
	}
	return nil
}

// sampleRun scrapes for f.duration, taking a sample every f.interval and
// one at the end.
func sampleRun(ctx context.Context, f flags, out io.Writer, ex *exporterProc, conn *pgx.Conn, sc *scraper) ([]Sample, error) {
	runCtx, stopRun := context.WithTimeout(ctx, f.duration)
	defer stopRun()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); sc.loop(runCtx, f.scrapeEvery, f.apiEvery) }()

	fmt.Fprintf(out, "Soaking for %s, a sample every %s, scrapes every %s ...\n\n", f.duration, f.interval, f.scrapeEvery)
	start := time.Now()
	var samples []Sample
	tick := time.NewTicker(f.interval)
	defer tick.Stop()
	take := func() {
		// Its own deadline, not runCtx's: a query cancelled by the end of
		// the run would close the connection the last sample needs.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		s, err := sampleNow(sctx, time.Since(start), ex.cmd.Process.Pid, conn, sc)
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak: sample:", err)
			return
		}
		samples = append(samples, s)
		fmt.Fprintf(os.Stderr, "t=%s exporter rss=%sMiB heap=%sMiB goroutines=%.0f sessions=%d scrape max=%sms fail=%d\n",
			s.Elapsed.Round(time.Second), mib(s.RSS), mib(s.HeapInuse), s.Goroutines, s.Sessions, ms(s.ScrapeMax), s.ScrapeFail)
	}
loop:
	for {
		select {
		case <-runCtx.Done():
			break loop
		case werr := <-ex.exited:
			ex.exited <- werr
			stopRun()
			wg.Wait()
			return nil, fmt.Errorf("the exporter exited during the soak (see %s): %v", ex.logPath, werr)
		case <-tick.C:
			if runCtx.Err() == nil {
				take()
			}
		}
	}
	wg.Wait()
	// The last sample, taken after the scraper stopped, unless a tick
	// just took one.
	if n := len(samples); n == 0 || time.Since(start)-samples[n-1].Elapsed > f.interval/2 {
		take()
	}
	return samples, nil
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	return port, err
}

// waitReady polls /-/ready until the exporter answers 200.
func waitReady(ctx context.Context, client *http.Client, base string, exited chan error) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case werr := <-exited:
			exited <- werr
			return fmt.Errorf("the exporter exited before it was ready: %v", werr)
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/-/ready", nil)
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("the exporter was not ready within 60s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// scraper scrapes /metrics like Prometheus and now and then GETs the page
// and the API, keeping counts since the last sample.
type scraper struct {
	client *http.Client
	base   string
	header string

	mu        sync.Mutex
	last      Exposition
	haveLast  bool
	n, fail   int
	sum, maxD time.Duration
	api, apiF int
}

var apiPaths = []string{"/", "/api/v1/stuck?outbox=messages", "/api/v1/reconcile?job=search_index", "/api/v1/audit?outbox=messages"}

// loop runs until ctx ends. A request in flight then is let finish (the
// client's timeout bounds it): a scrape cut off by the soak would show in
// the exporter's log as a failed collection that is not its fault.
func (s *scraper) loop(ctx context.Context, every, apiEvery time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	lastAPI := time.Now()
	reqCtx := context.WithoutCancel(ctx)
	for {
		s.scrape(reqCtx)
		if time.Since(lastAPI) >= apiEvery && ctx.Err() == nil {
			lastAPI = time.Now()
			for _, p := range apiPaths {
				s.get(reqCtx, p)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *scraper) scrape(ctx context.Context) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/metrics", nil)
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", s.header)
	start := time.Now()
	resp, err := s.client.Do(req)
	var e Exposition
	if err == nil {
		if resp.StatusCode == http.StatusOK {
			e, err = parseExposition(resp.Body)
		} else {
			err = fmt.Errorf("status %s", resp.Status)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	d := time.Since(start)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	s.sum += d
	s.maxD = max(s.maxD, d)
	if err != nil {
		s.fail++
		fmt.Fprintln(os.Stderr, "soak: scrape:", err)
		return
	}
	s.last, s.haveLast = e, true
}

func (s *scraper) get(ctx context.Context, path string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path, nil)
	resp, err := s.client.Do(req)
	ok := err == nil && resp.StatusCode == http.StatusOK
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.api++
	if !ok {
		s.apiF++
		if err == nil {
			err = fmt.Errorf("status %s", resp.Status)
		}
		fmt.Fprintf(os.Stderr, "soak: GET %s: %v\n", path, err)
	}
}

// take returns the counts since the last call and resets them.
func (s *scraper) take() (last Exposition, have bool, n, fail int, mean, maxD time.Duration, api, apiF int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last, have, n, fail, maxD, api, apiF = s.last, s.haveLast, s.n, s.fail, s.maxD, s.api, s.apiF
	if n > 0 {
		mean = s.sum / time.Duration(n)
	}
	s.n, s.fail, s.sum, s.maxD, s.api, s.apiF = 0, 0, 0, 0, 0, 0
	return
}

func sampleNow(ctx context.Context, elapsed time.Duration, pid int, conn *pgx.Conn, sc *scraper) (Sample, error) {
	s := Sample{Elapsed: elapsed}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("read the exporter's status: %w", err)
	}
	if s.RSS, err = parseVmRSS(string(status)); err != nil {
		return s, err
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()`,
		pgx.QueryExecModeSimpleProtocol, pg.ApplicationName).Scan(&s.Sessions); err != nil {
		return s, fmt.Errorf("count exporter sessions: %w", err)
	}
	last, have, n, fail, mean, maxD, api, apiF := sc.take()
	if !have {
		return s, errors.New("no successful scrape yet")
	}
	s.Goroutines, s.HeapInuse, s.Failing = last.Goroutines, last.HeapInuse, last.Failing
	s.Scrapes, s.ScrapeFail, s.ScrapeMean, s.ScrapeMax, s.APICalls, s.APIFail = n, fail, mean, maxD, api, apiF

	own, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return s, fmt.Errorf("read own status: %w", err)
	}
	if s.DemoRSS, err = parseVmRSS(string(own)); err != nil {
		return s, err
	}
	ms := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(ms)
	if ms[0].Value.Kind() == metrics.KindUint64 {
		s.DemoHeap = ms[0].Value.Uint64()
	}
	s.DemoGoroutines = runtime.NumGoroutine()
	return s, nil
}

// countLogLevels counts logfmt lines at level=error and level=warn.
func countLogLevels(path string) (errs, warns int) {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1, -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.Contains(l, "level=ERROR"), strings.Contains(l, "level=error"):
			errs++
		case strings.Contains(l, "level=WARN"), strings.Contains(l, "level=warn"):
			warns++
		}
	}
	return errs, warns
}
