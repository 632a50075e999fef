package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/outbox-exporter/outbox_exporter/alerts"
	"github.com/outbox-exporter/outbox_exporter/demo"
	"github.com/outbox-exporter/outbox_exporter/generate"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/web"
)

const (
	// scrapeInterval is Prometheus's scrape and rule evaluation interval.
	scrapeInterval = 2 * time.Second
	// healthyFor is how long the pipeline runs without faults, and
	// without any alert, after Prometheus first scraped the exporter.
	healthyFor = time.Minute
	// alertBound is how soon after its injection each fault's own alert
	// must reach the webhook. The slowest, the audit's, needs the audit's
	// comparison (every 30s), grace and bucket, a shortened for: of 15s,
	// an evaluation and Alertmanager's group_wait: about 60s.
	alertBound = 2 * time.Minute
	// dashboardData is how much data Prometheus must hold before the
	// dashboards' queries run.
	dashboardData = 2 * time.Minute
	// jobName is the scrape job; the config's alerting selector names it,
	// so the generated rules and dashboards select on it.
	jobName = "outbox_exporter"
)

// demoOptions are the demo's deadlines shortened for the test: the
// outbox deadline 8s, the lag deadlines 15s and 8s, leases 3s; a crashed
// relay's row is taken back after 30s, so that it outlasts its alerts'
// shortened for:, and a lost acknowledgement retried after 150s, so that
// its row is still stuck on the page; the notify group stalls for 2m, so
// that it is still red on the page too; the order fault's relay stalls
// 40s, longer than its alert's shortened for:;
// reconcile every 5s with 3s grace; the audit over a 2m window with 3s
// grace.
func demoOptions() demo.Options {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return demo.Options{
		DatabaseURL:       pgtest.ServerURL(),
		Database:          "outbox_e2e_" + hex.EncodeToString(b),
		DropOnClose:       true,
		FaultEvery:        0,
		Rate:              4,
		PollInterval:      100 * time.Millisecond,
		LeaseTTL:          3 * time.Second,
		ReclaimAfter:      30 * time.Second,
		UnknownBackoff:    150 * time.Second,
		StallFor:          2 * time.Minute,
		OrderStallFor:     40 * time.Second,
		OutboxDeadline:    8 * time.Second,
		GroupDeadline:     15 * time.Second,
		NotifyDeadline:    8 * time.Second,
		ReconcileSchedule: "@every 5s",
		ReconcileGrace:    3 * time.Second,
		AuditGrace:        3 * time.Second,
		AuditWindow:       2 * time.Minute,
	}
}

// TestEndToEnd runs the demo pipeline under the exporter (in process,
// served over HTTP on 127.0.0.1), real Prometheus with the generated rules
// (for: shortened by ShortFor) and real Alertmanager sending to a webhook
// here. The first healthy minute must raise no alert; then every fault of
// the demo is injected and must raise its own alert (Expectations) within
// alertBound. With the faults active, every generated dashboard query
// must return series and the page at / must show every part's state in
// headless Chromium; its screenshot is kept in $OUTBOX_ARTIFACTS.
func TestEndToEnd(t *testing.T) {
	promBin := requireBin(t, "prometheus")
	amBin := requireBin(t, "prometheus-alertmanager")
	chromeBin := requireBin(t, "chromium")
	requireVersion(t, promBin, "prometheus, version 2.")
	requireVersion(t, amBin, "alertmanager, version 0.")
	began := time.Now()
	dir := t.TempDir()

	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	announced := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("demo announcements:\n%s", announced.String())
			t.Logf("exporter and demo log (tail):\n%s", tail(logs.String(), 8000))
		}
	})

	// 1. The demo pipeline and the exporter on it.
	pipe, cfg, cfgFile := startDemo(t, dir, announced, logger)
	exporterURL := startExporter(t, cfgFile, logger.With("part", "exporter"))

	// 2. Rules and dashboards for that config; Alertmanager; Prometheus.
	genDir := filepath.Join(dir, "generated")
	if err := generate.Write(cfg, genDir); err != nil {
		t.Fatalf("generate: %v", err)
	}
	rulesFile := shortRules(t, filepath.Join(genDir, filepath.FromSlash(generate.RulesFile)), filepath.Join(dir, "rules.yml"))
	rcv := newReceiver(t)
	amAddr := startAlertmanager(t, amBin, dir, rcv.srv.URL)
	api := startPrometheus(t, promBin, dir, rulesFile, amAddr, exporterURL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t.Cleanup(func() {
		if t.Failed() {
			if states, err := api.alertStates(context.Background()); err == nil {
				t.Logf("Prometheus's active alerts at the end:\n  %s", strings.Join(states, "\n  "))
			}
			t.Logf("the exporter's outbox metrics at the end:\n%s", outboxMetrics(exporterURL))
		}
	})

	firstScrape := waitScraped(t, ctx, api, ScrapeWait)
	t.Logf("%s: Prometheus scrapes the exporter; healthy for %s", since(began), healthyFor)

	// 3. A healthy minute: no alert.
	time.Sleep(time.Until(firstScrape.Add(healthyFor)))
	checkHealthy(t, ctx, rcv, api)

	// Then each fault, each raising its own alert.
	injected := injectFaults(t, ctx, pipe, rcv, began)
	checkFaultAlerts(t, injected, rcv)
	t.Logf("%s: the faults' alerts are in", since(began))

	// 4 and 5, side by side: the dashboards' queries and the page.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		checkPage(t, ctx, chromeBin, exporterURL, cfg)
	}()
	time.Sleep(time.Until(firstScrape.Add(dashboardData)))
	checkDashboards(t, ctx, api, genDir, firstScrape)
	wg.Wait()
	t.Logf("%s: done", since(began))
}

// startDemo starts the demo pipeline with demoOptions (closed when the
// test ends) and writes its config, with the alerting selector naming
// jobName, into dir.
func startDemo(t *testing.T, dir string, announced io.Writer, logger *slog.Logger) (*demo.Pipeline, *config.Config, string) {
	t.Helper()
	opts := demoOptions()
	opts.Out = announced
	startCtx, cancelStart := context.WithTimeout(context.Background(), time.Minute)
	defer cancelStart()
	pipe, err := demo.Start(startCtx, opts, logger.With("part", "demo"))
	if err != nil {
		t.Fatalf("start the demo pipeline: %v", err)
	}
	t.Cleanup(func() {
		if err := pipe.Close(); err != nil {
			t.Errorf("close the demo pipeline: %v", err)
		}
	})
	cfgYAML := append(pipe.ConfigYAML(), []byte("\nalerting:\n  selector: 'job=\""+jobName+"\"'\n")...)
	cfgFile := filepath.Join(dir, "outbox_exporter.yml")
	if err := os.WriteFile(cfgFile, cfgYAML, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgFile)
	if err != nil {
		t.Fatalf("load the demo's config: %v", err)
	}
	return pipe, cfg, cfgFile
}

// startAlertmanager runs Alertmanager sending every alert at once to the
// webhook at receiverURL and returns its address.
func startAlertmanager(t *testing.T, amBin, dir, receiverURL string) string {
	t.Helper()
	amAddr := freeAddr(t)
	amConfig := filepath.Join(dir, "alertmanager.yml")
	writeFile(t, amConfig, fmt.Sprintf(`route:
  receiver: test
  group_by: ['...']
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: test
    webhook_configs:
      - url: %s/alerts
        send_resolved: true
`, receiverURL))
	am := startProc(t, "alertmanager", amBin, "--config.file="+amConfig, "--storage.path="+filepath.Join(dir, "am"),
		"--web.listen-address="+amAddr, "--cluster.listen-address=", "--log.level=warn")
	waitReady(t, am, "http://"+amAddr+"/-/ready", time.Minute)
	return amAddr
}

// startPrometheus runs Prometheus scraping the exporter as jobName with
// rulesFile, alerting to the Alertmanager at amAddr.
func startPrometheus(t *testing.T, promBin, dir, rulesFile, amAddr, exporterURL string) promAPI {
	t.Helper()
	promAddr := freeAddr(t)
	promConfig := filepath.Join(dir, "prometheus.yml")
	writeFile(t, promConfig, fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
  evaluation_interval: %[1]s
rule_files: [%[2]q]
alerting:
  alertmanagers:
    - static_configs:
        - targets: [%[3]q]
scrape_configs:
  - job_name: %[4]s
    static_configs:
      - targets: [%[5]q]
`, scrapeInterval, rulesFile, amAddr, jobName, strings.TrimPrefix(exporterURL, "http://")))
	prom := startProc(t, "prometheus", promBin, "--config.file="+promConfig, "--storage.tsdb.path="+filepath.Join(dir, "prom"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	waitReady(t, prom, "http://"+promAddr+"/-/ready", time.Minute)
	return promAPI{base: "http://" + promAddr, client: &http.Client{Timeout: 20 * time.Second}}
}

// checkHealthy checks that the healthy pipeline raised no alert and that
// Prometheus loaded the rules, all healthy.
func checkHealthy(t *testing.T, ctx context.Context, rcv *receiver, api promAPI) {
	t.Helper()
	if got := rcv.received(); len(got) > 0 {
		t.Errorf("the healthy first %s raised alerts (a bug in the rules or the demo): %s", healthyFor, rcv.describe())
	}
	if bad, loaded, err := api.ruleHealth(ctx); err != nil {
		t.Fatal(err)
	} else if len(bad) > 0 || loaded == 0 {
		t.Errorf("Prometheus loaded %d rules; failing: %v", loaded, bad)
	}
	if states, err := api.alertStates(ctx); err == nil && len(states) > 0 {
		t.Logf("pending or firing after the healthy minute:\n  %s", strings.Join(states, "\n  "))
	}
}

// injectFaults injects every fault of the demo and returns when each was
// injected. mark_before_send leaves a missing_target gap too, so it comes
// once index_row_lost's gap alert has arrived.
func injectFaults(t *testing.T, ctx context.Context, pipe *demo.Pipeline, rcv *receiver, began time.Time) map[demo.FaultKind]time.Time {
	t.Helper()
	injected := map[demo.FaultKind]time.Time{}
	inject := func(kind demo.FaultKind) {
		t.Helper()
		ictx, icancel := context.WithTimeout(ctx, 30*time.Second)
		defer icancel()
		rec, err := pipe.InjectFault(ictx, kind)
		if err != nil {
			t.Fatalf("inject %s: %v", kind, err)
		}
		injected[kind] = rec.At
		t.Logf("%s: injected %s (events %v, messages %v)", since(began), kind, rec.EventIDs, rec.MessageIDs)
	}
	for _, kind := range demo.FaultKinds {
		if kind != demo.FaultMarkBeforeSend {
			inject(kind)
		}
	}
	missingTarget := AlertKey{Name: "OutboxReconcileGaps", Kind: "missing_target"}
	for {
		if _, ok := rcv.received()[missingTarget]; ok {
			break
		}
		if time.Since(injected[demo.FaultIndexRowLost]) > alertBound {
			t.Errorf("index_row_lost did not raise %s within %s", missingTarget, alertBound)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	inject(demo.FaultMarkBeforeSend)
	for _, kind := range demo.FaultKinds {
		if _, ok := injected[kind]; !ok {
			t.Fatalf("fault %s is not injected: add it to the test's order", kind)
		}
	}
	return injected
}

// checkFaultAlerts waits up to alertBound after the last fault for every
// fault's own alert, logs how soon each came, and checks that no alert
// arrived that no fault explains.
func checkFaultAlerts(t *testing.T, injected map[demo.FaultKind]time.Time, rcv *receiver) {
	t.Helper()
	last := injected[demo.FaultMarkBeforeSend]
	var missing []string
	for {
		missing = Missing(injected, rcv.received(), alertBound)
		if len(missing) == 0 || time.Since(last) > alertBound {
			break
		}
		time.Sleep(time.Second)
	}
	if len(missing) > 0 {
		t.Errorf("faults without their alert:\n  %s\nreceived: %s", strings.Join(missing, "\n  "), rcv.describe())
	}
	got := rcv.received()
	for _, e := range Expectations {
		for _, k := range e.Own {
			if at, ok := got[k]; ok {
				t.Logf("%s -> %s after %s", e.Fault, k, at.Sub(injected[e.Fault]).Round(time.Second))
			}
		}
		for _, k := range e.May {
			if at, ok := got[k]; ok {
				t.Logf("%s may raise %s: it arrived %s after the fault", e.Fault, k, at.Sub(injected[e.Fault]).Round(time.Second))
			}
		}
	}
	if extra := Unexpected(got); len(extra) > 0 {
		t.Errorf("alerts no fault explains: %v\nreceived: %s", extra, rcv.describe())
	}
}

func since(t time.Time) string { return time.Since(t).Round(time.Second).String() }

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// requireVersion fails unless `bin --version` prints want.
func requireVersion(t *testing.T, bin, want string) {
	t.Helper()
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("%s --version: %v: %s; want %q... : %s", bin, err, bytes.TrimSpace(out), want, install)
	}
}

// startExporter serves the exporter for cfgFile on a free 127.0.0.1 port
// and returns its base URL; everything stops when the test ends.
func startExporter(t *testing.T, cfgFile string, logger *slog.Logger) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := web.New(ctx, web.Options{ConfigFile: cfgFile, ScrapeTimeout: 10 * time.Second,
		TimeoutOffset: 300 * time.Millisecond, Logger: logger})
	if err != nil {
		cancel()
		t.Fatalf("start the exporter: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		srv.Close()
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = hs.Shutdown(sctx)
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("exporter HTTP server: %v", err)
		}
		srv.Close()
		cancel()
	})
	return "http://" + ln.Addr().String()
}

// shortRules reads the generated rule file, shortens every for: with
// ShortenRules, writes the result to dst and returns dst.
func shortRules(t *testing.T, src, dst string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var f alerts.File
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("parse %s: %v", src, err)
	}
	names := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			names[r.Alert] = true
		}
	}
	for k := range ExplainedAlerts() {
		if !names[k.Name] {
			t.Fatalf("the generated rules have no alert %s, which the test expects of a fault", k.Name)
		}
	}
	short, err := ShortenRules(f)
	if err != nil {
		t.Fatal(err)
	}
	out, err := alerts.Marshal(short)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dst, string(out))
	return dst
}

// waitScraped waits until Prometheus has scraped the exporter and returns
// when.
func waitScraped(t *testing.T, ctx context.Context, api promAPI, d time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		r, err := api.query(ctx, `up{job="`+jobName+`"} == 1`, time.Now())
		if err == nil && len(r.Result) > 0 {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus did not scrape the exporter within %s: %v", d, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// outboxMetrics returns the outbox_ lines the exporter serves now.
func outboxMetrics(base string) string {
	resp, err := (&http.Client{Timeout: 15 * time.Second}).Get(base + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	var lines []string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, "outbox_") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// emptyPanels lists the dashboard panels that may legitimately return no
// series in this run, with the reason. Key: file / panel title.
var emptyPanels = map[string]string{}

// checkDashboards runs every panel target of every generated dashboard,
// variables substituted as Grafana would, as an instant and as a range
// query, and every label_values variable query; each must return data.
func checkDashboards(t *testing.T, ctx context.Context, api promAPI, genDir string, from time.Time) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(genDir, generate.DashboardDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated dashboards in %s: %v", genDir, err)
	}
	sort.Strings(files)
	now := time.Now()
	var problems []string
	targets, variables := 0, 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		d, err := ParseDashboard(filepath.Base(file), b)
		if err != nil {
			t.Fatal(err)
		}
		values, err := Values(d.Variables, Builtins(scrapeInterval.String()))
		if err != nil {
			t.Fatalf("%s: %v", d.File, err)
		}
		for _, v := range d.Variables {
			if v.Type != "query" {
				continue
			}
			variables++
			q, err := Substitute(v.Query, values)
			if err == nil {
				var sel, label string
				if sel, label, err = ParseLabelValues(q); err == nil {
					var vs []string
					if vs, err = api.labelValues(ctx, label, sel, from, now); err == nil && len(vs) == 0 {
						err = fmt.Errorf("no values")
					}
				}
			}
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: variable %s (%s): %v", d.File, v.Name, v.Query, err))
			}
		}
		for _, tg := range d.Targets {
			targets++
			if reason, ok := emptyPanels[tg.Dashboard+" / "+tg.Panel]; ok {
				t.Logf("%s may be empty: %s", tg, reason)
				continue
			}
			expr, err := Substitute(tg.Expr, values)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", tg, err))
				continue
			}
			inst, err := api.query(ctx, expr, now)
			if err == nil && len(inst.Result) == 0 {
				err = errors.New("no series")
			}
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: instant query %s: %v", tg, expr, err))
			}
			rng, err := api.queryRange(ctx, expr, from, now, 10*time.Second)
			if err == nil && len(rng.Result) == 0 {
				err = errors.New("no series")
			}
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: range query %s: %v", tg, expr, err))
			}
		}
	}
	if len(problems) > 0 {
		t.Errorf("dashboard queries without data (%d of %d targets and %d variables checked):\n  %s",
			len(problems), targets, variables, strings.Join(problems, "\n  "))
	}
	t.Logf("dashboards: %d targets (instant and range) and %d variable queries checked over %s of data",
		targets, variables, now.Sub(from).Round(time.Second))
}

// checkPage loads / in headless Chromium, checks its DOM and keeps a
// screenshot in $OUTBOX_ARTIFACTS (else a temporary directory).
func checkPage(t *testing.T, ctx context.Context, bin, base string, cfg *config.Config) {
	t.Helper()
	artifacts := os.Getenv("OUTBOX_ARTIFACTS")
	if artifacts == "" {
		artifacts = t.TempDir()
	} else if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Errorf("artifacts directory: %v", err)
		return
	}
	shot := filepath.Join(artifacts, "e2e-page.png")
	tmp := t.TempDir()
	var (
		wg      sync.WaitGroup
		dom     []byte
		domErr  error
		shotErr error
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		dom, domErr = runChromium(ctx, bin, filepath.Join(tmp, "dom"), 2*time.Minute, "--dump-dom", base+"/")
	}()
	go func() {
		defer wg.Done()
		_, shotErr = runChromium(ctx, bin, filepath.Join(tmp, "shot"), 2*time.Minute,
			"--screenshot="+shot, "--window-size=1280,1600", "--hide-scrollbars", base+"/")
	}()
	wg.Wait()
	if domErr != nil {
		t.Errorf("page DOM: %v", domErr)
	} else {
		_ = os.WriteFile(filepath.Join(artifacts, "e2e-page.html"), dom, 0o644)
		want := PageWant{Groups: []string{demo.GroupSearchIndex, demo.GroupNotify}, Stuck: true}
		for name := range cfg.Outboxes {
			want.Outboxes = append(want.Outboxes, name)
		}
		for name := range cfg.Reconcile {
			want.Reconciles = append(want.Reconciles, name)
		}
		for name := range cfg.Audit {
			want.Audits = append(want.Audits, name)
		}
		rep := CheckPage(dom, want)
		problems := append(rep.Problems, followLinks(ctx, base, rep.Links)...)
		if len(problems) > 0 {
			t.Errorf("the page at / (DOM kept in %s):\n  %s", artifacts, strings.Join(problems, "\n  "))
		}
		t.Logf("page: %s; %d links", rep.Summary, len(rep.Links))
	}
	if shotErr != nil {
		t.Errorf("page screenshot: %v", shotErr)
		return
	}
	png, err := os.ReadFile(shot)
	if err != nil || len(png) < 10_000 || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("screenshot %s is not a PNG of the page (%d bytes): %v", shot, len(png), err)
		return
	}
	t.Logf("page screenshot: %s (%d KB)", shot, len(png)/1024)
}

// followLinks gets every link of the page that points into the exporter:
// each must answer 200, and the JSON APIs JSON.
func followLinks(ctx context.Context, base string, links []string) []string {
	client := &http.Client{Timeout: 20 * time.Second}
	var problems []string
	for _, l := range links {
		if !strings.HasPrefix(l, "/") {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+l, nil)
		if err != nil {
			problems = append(problems, fmt.Sprintf("link %s: %v", l, err))
			continue
		}
		resp, err := client.Do(req)
		if err != nil {
			problems = append(problems, fmt.Sprintf("link %s: %v", l, err))
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("link %s: read: %v", l, err))
		case resp.StatusCode != http.StatusOK:
			problems = append(problems, fmt.Sprintf("link %s: %s", l, resp.Status))
		case strings.HasPrefix(l, "/api/") && !json.Valid(body):
			problems = append(problems, fmt.Sprintf("link %s: not JSON: %s", l, tail(string(body), 200)))
		}
	}
	return problems
}
