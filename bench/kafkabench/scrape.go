package main

// -scrape mode: the whole HTTP scrape of the running exporter (web.Server:
// every collector of the configuration, the registry, the text encoding,
// the page's history recorder) against one bare kadm.Lag over the same
// groups, in the same process and run, on kfake or on Apache Kafka.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
	"github.com/outbox-exporter/outbox_exporter/web"
)

type scrapeRow struct {
	groups                                   int
	lagCold, scrapeCold, lagWarm, scrapeWarm time.Duration
	cpu                                      [4]time.Duration // lag cold, scrape cold, lag warm, scrape steady
	series                                   int
	heapPerGroup, heapInUse                  uint64
	seedTook                                 time.Duration
}

// startBroker starts the cluster the scrape mode measures: kfake in a
// child process, or one Apache Kafka node (a JVM child process). The
// returned version names it.
func startBroker(kind string, brokers int) (addrs []string, version string, stop func(), err error) {
	switch kind {
	case "kfake":
		addrs, stop, err := startCluster(brokers)
		return addrs, "kfake (franz-go)", stop, err
	case "kafka":
		opts, err := kafkaOptions()
		if err != nil {
			return nil, "", nil, err
		}
		b, err := kafkatest.Start(opts)
		if err != nil {
			return nil, "", nil, err
		}
		return b.Brokers(), "Apache Kafka " + b.Version + " (one KRaft node, JVM child process; " + brokerSettings() + ")", b.Stop, nil
	}
	return nil, "", nil, fmt.Errorf("-broker %q: want kfake or kafka", kind)
}

func runScrape(o options) {
	var rows []scrapeRow
	var version string
	for _, n := range o.sizes {
		addrs, v, stop, err := startBroker(o.broker, o.brokers)
		if err != nil {
			fail(err)
		}
		version = v
		r, err := scrapeOne(addrs, n, o)
		stop()
		if err != nil {
			fail(err)
		}
		rows = append(rows, r)
	}
	fmt.Printf("\n%s; %d topics x %d partitions, %d records of 100 bytes per partition, every group lagging on every partition; whole HTTP /metrics scrape of the running exporter vs one bare kadm.Lag, same process, alternating; medians of %d runs (steady: 3 per run); Go %s, GOMAXPROCS %d\n\n",
		version, o.topics, o.partitions, o.records, o.reps, runtime.Version(), runtime.GOMAXPROCS(0))
	base, kind := "kadm.Lag", "consumer groups"
	if o.share {
		base, kind = "kadm share describe", "share groups"
	}
	fmt.Printf("%s; baseline %s\n\n", kind, base)
	fmt.Printf("| groups | %[1]s cold | scrape cold | ratio | CPU ratio | %[1]s warm | scrape steady | ratio | CPU ratio | series | heap per group | heap in use | scrape steady per group | CPU per group |\n", base)
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %d | %s | %s | %.2fx | %.2fx | %s | %s | %.2fx | %.2fx | %d | %.1f KB | %s | %.1f µs | %.1f µs |\n",
			r.groups, ms(r.lagCold), ms(r.scrapeCold), ratio(r.scrapeCold, r.lagCold), ratio(r.cpu[1], r.cpu[0]),
			ms(r.lagWarm), ms(r.scrapeWarm), ratio(r.scrapeWarm, r.lagWarm), ratio(r.cpu[3], r.cpu[2]),
			r.series, float64(r.heapPerGroup)/1024, mb(r.heapInUse),
			float64(r.scrapeWarm.Nanoseconds())/1e3/float64(r.groups), float64(r.cpu[3].Nanoseconds())/1e3/float64(r.groups))
	}
	if len(rows) >= 2 {
		a, b := rows[len(rows)-2], rows[len(rows)-1]
		g := float64(b.groups) / float64(a.groups)
		fmt.Printf("\nGrowth %[1]d -> %[2]d groups (x%.0[3]f): scrape steady x%.2[4]f, %[9]s warm x%.2[5]f; scrape cold x%.2[6]f, %[9]s cold x%.2[7]f; heap x%.2[8]f\n",
			a.groups, b.groups, g, ratio(b.scrapeWarm, a.scrapeWarm), ratio(b.lagWarm, a.lagWarm),
			ratio(b.scrapeCold, a.scrapeCold), ratio(b.lagCold, a.lagCold), float64(b.heapInUse)/float64(max(a.heapInUse, 1)), base)
		if b.heapInUse > a.heapInUse {
			// What each added group costs, apart from what the exporter
			// holds whatever the number of groups (the registry, the
			// HTTP server, a kept gzip writer): heap per group divides
			// those too, which weighs at small sizes.
			fmt.Printf("Heap of each group added from %d to %d groups: %.1f KB\n",
				a.groups, b.groups, float64(b.heapInUse-a.heapInUse)/1024/float64(b.groups-a.groups))
		}
	}
	fmt.Printf("Peak RSS of the measured process: %s (the broker is a child process)\n", mb(peakRSS()))
	for _, r := range rows {
		fmt.Printf("Seeding %d groups took %s\n", r.groups, r.seedTook.Round(time.Millisecond))
	}
}

func scrapeOne(addrs []string, groups int, o options) (scrapeRow, error) {
	r := scrapeRow{groups: groups}
	k := &config.Kafka{Brokers: addrs, Deadline: 10 * time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	t0 := time.Now()
	names, err := seed(ctx, k, groups, o.partitions, o.topics, o.records, o.batch, o.share)
	if err != nil {
		return r, err
	}
	r.seedTook = time.Since(t0)
	fmt.Fprintf(os.Stderr, "seeded %d groups in %s\n", groups, r.seedTook.Round(time.Millisecond))
	if o.share {
		if err := sharesSettled(ctx, k, names); err != nil {
			return r, err
		}
	}

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	ex, err := startExporter(ctx, addrs, o.share)
	if err != nil {
		return r, err
	}
	defer ex.stop()
	hc := &http.Client{Timeout: 2 * time.Minute}
	url := ex.url
	// The server's first background collection; then every measured cold
	// scrape follows a reload to a changed cluster configuration (a new
	// collector: new clients, empty caches).
	if _, _, err := scrapeHTTP(hc, url, "", ""); err != nil {
		return r, err
	}
	// Samples: kadm.Lag cold, scrape cold, kadm.Lag warm, scrape steady;
	// wall and CPU.
	var wall, cpu [4][]time.Duration
	for i := 0; i < o.reps; i++ {
		if err := measureOnce(ctx, k, names, ex, hc, &wall, &cpu, &r.series, o.share); err != nil {
			return r, err
		}
	}
	if err := profileSteady(hc, url, o.profileScrapes); err != nil {
		return r, err
	}
	if min := minSeries(o.share) * groups; r.series < min && !partialOK {
		return r, fmt.Errorf("scrape exported %d %s series for %d groups, want at least %d", r.series, seriesPrefix(o.share), groups, min)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if after.HeapAlloc > before.HeapAlloc {
		r.heapInUse = after.HeapAlloc - before.HeapAlloc
		r.heapPerGroup = r.heapInUse / uint64(groups)
	}
	if err := writeHeapProfile(o.heapprofile, groups); err != nil {
		return r, err
	}
	r.lagCold, r.scrapeCold, r.lagWarm, r.scrapeWarm = median(wall[0]), median(wall[1]), median(wall[2]), median(wall[3])
	for i := range cpu {
		r.cpu[i] = median(cpu[i])
	}
	reportRow(r, wall, cpu)
	return r, nil
}

// steadyMemProfile, with -scrape -memprofile FILE, is where the
// allocation profiles around the profiled steady scrapes go: FILE.base
// before them, FILE after; their difference is the scrapes' allocations.
var steadyMemProfile string

// profileSteady takes n more steady scrapes under the CPU profile and
// between two allocation profiles, so that they show the scrape alone
// (-cpuprofile, -memprofile; nothing without either).
func profileSteady(hc *http.Client, url string, n int) error {
	if profile == "" && steadyMemProfile == "" {
		return nil
	}
	stop, err := startProfile()
	if err != nil {
		return err
	}
	defer stop()
	if steadyMemProfile != "" {
		runtime.GC()
		writeMemProfile(steadyMemProfile + ".base")
	}
	for i := 0; i < n; i++ {
		if _, _, err := scrapeHTTP(hc, url, "", ""); err != nil {
			return err
		}
	}
	if steadyMemProfile != "" {
		runtime.GC()
		writeMemProfile(steadyMemProfile)
	}
	return nil
}

// measureOnce takes one cold pair (a new kadm client; a scrape after a
// reload) and three steady pairs, alternating.
func measureOnce(ctx context.Context, k *config.Kafka, names []string, ex *exporter, hc *http.Client, wall, cpu *[4][]time.Duration, series *int, share bool) error {
	cl, err := kafkaclient.New(k, baselineOpts(share)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	lag := func(i int) error {
		timed := timeLag
		if share {
			timed = timeShares
		}
		d, err := timed(ctx, adm, names)
		wall[i], cpu[i] = append(wall[i], d), append(cpu[i], lastCPU)
		return err
	}
	scrape := func(i int, want string) error {
		d, n, err := scrapeHTTP(hc, ex.url, want, seriesPrefix(ex.share))
		wall[i], cpu[i] = append(wall[i], d), append(cpu[i], lastCPU)
		*series = n
		return err
	}
	if err := lag(0); err != nil {
		return err
	}
	want, err := ex.reload(names[0])
	if err != nil {
		return err
	}
	if err := scrape(1, want); err != nil {
		return err
	}
	for j := 0; j < 3; j++ {
		if err := lag(2); err != nil {
			return err
		}
		if err := scrape(3, ""); err != nil {
			return err
		}
	}
	return nil
}

// exporter is the running exporter behind a loopback HTTP server, on a
// configuration holding only the Kafka cluster.
type exporter struct {
	srv      *web.Server
	url      string
	cfgFile  string
	addrs    []string
	deadline int // minutes
	share    bool
	stop     func()
}

func (e *exporter) writeConfig() error {
	key := "groups"
	if e.share {
		key = "share_groups"
	}
	cfg := fmt.Sprintf("kafka:\n  bench:\n    brokers: [%s]\n    %s: [\"/g.*/\"]\n    deadline: %dm\n", strings.Join(e.addrs, ", "), key, e.deadline)
	return os.WriteFile(e.cfgFile, []byte(cfg), 0o600)
}

// reload makes the next scrape cold: a reload keeps a cluster's collector
// (and its caches) when its configuration did not change, so the
// deadline moves on by a minute each time. It returns the line the next
// scrape must show: group's new deadline, proof that the collector is new.
func (e *exporter) reload(group string) (string, error) {
	e.deadline++
	if err := e.writeConfig(); err != nil {
		return "", err
	}
	if err := e.srv.Reload(); err != nil {
		return "", err
	}
	return fmt.Sprintf(vocab.ConsumerDeadline+"{cluster=\"bench\",group=%q} %d\n", group, e.deadline*60), nil
}

func startExporter(ctx context.Context, addrs []string, share bool) (*exporter, error) {
	dir, err := os.MkdirTemp("", "kafkabench-")
	if err != nil {
		return nil, err
	}
	e := &exporter{cfgFile: filepath.Join(dir, "config.yaml"), addrs: addrs, deadline: 10, share: share}
	if err := e.writeConfig(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	e.srv, err = web.New(sctx, web.Options{ConfigFile: e.cfgFile, ScrapeTimeout: scrapeTimeout,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: exporterLog}))})
	if err != nil {
		cancel()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start exporter: %w", err)
	}
	hs := httptest.NewServer(e.srv.Handler())
	e.url = hs.URL
	e.stop = func() { hs.Close(); e.srv.Close(); cancel(); os.RemoveAll(dir) }
	return e, nil
}

// scrapeHTTP GETs /metrics, reads the whole body, and counts the
// consumer series; a scrape whose Kafka collector failed, or that lacks
// want (when given), is an error. Its time and lastCPU end when the body
// is read, before the checks, as timeLag's end when kadm.Lag returns.
func scrapeHTTP(hc *http.Client, base, want, prefix string) (time.Duration, int, error) {
	c0 := cpuTime()
	start := time.Now()
	resp, err := hc.Get(base + "/metrics")
	if err != nil {
		return 0, 0, fmt.Errorf("scrape: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	lastCPU = cpuTime() - c0
	if err != nil || resp.StatusCode != http.StatusOK {
		return d, 0, fmt.Errorf("scrape: status %d: %v", resp.StatusCode, err)
	}
	s := string(body)
	if !strings.Contains(s, vocab.CollectorSuccess+`{collector="kafka",target="bench"} 1`) {
		if !partialOK {
			return d, 0, fmt.Errorf("scrape: the kafka collector did not succeed")
		}
		partialScrapes++
	}
	if want != "" && !strings.Contains(s, want) {
		return d, 0, fmt.Errorf("scrape: no line %q: the reload did not take", want)
	}
	return d, strings.Count(s, "\n"+prefix), nil
}
