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
	"runtime/pprof"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
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
		b, err := kafkatest.Start(kafkatest.Options{Heap: "1g", OffsetsPartitions: 50})
		if err != nil {
			return nil, "", nil, err
		}
		return b.Brokers(), "Apache Kafka " + b.Version + " (one KRaft node, JVM child process)", b.Stop, nil
	}
	return nil, "", nil, fmt.Errorf("-broker %q: want kfake or kafka", kind)
}

func runScrape(kind string, sizes []int, partitions, topics, records, batch, brokers, reps int) {
	var rows []scrapeRow
	var version string
	for _, n := range sizes {
		addrs, v, stop, err := startBroker(kind, brokers)
		if err != nil {
			fail(err)
		}
		version = v
		r, err := scrapeOne(addrs, n, partitions, topics, records, batch, reps)
		stop()
		if err != nil {
			fail(err)
		}
		rows = append(rows, r)
	}
	fmt.Printf("\n%s; %d topics x %d partitions, %d records of 100 bytes per partition, every group lagging on every partition; whole HTTP /metrics scrape of the running exporter vs one bare kadm.Lag, same process, alternating; medians of %d runs (steady: 3 per run); Go %s, GOMAXPROCS %d\n\n",
		version, topics, partitions, records, reps, runtime.Version(), runtime.GOMAXPROCS(0))
	fmt.Println("| groups | kadm.Lag cold | scrape cold | ratio | CPU ratio | kadm.Lag warm | scrape steady | ratio | CPU ratio | series | heap per group | heap in use |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %d | %s | %s | %.2fx | %.2fx | %s | %s | %.2fx | %.2fx | %d | %.1f KB | %s |\n",
			r.groups, ms(r.lagCold), ms(r.scrapeCold), ratio(r.scrapeCold, r.lagCold), ratio(r.cpu[1], r.cpu[0]),
			ms(r.lagWarm), ms(r.scrapeWarm), ratio(r.scrapeWarm, r.lagWarm), ratio(r.cpu[3], r.cpu[2]),
			r.series, float64(r.heapPerGroup)/1024, mb(r.heapInUse))
	}
	if len(rows) >= 2 {
		a, b := rows[len(rows)-2], rows[len(rows)-1]
		g := float64(b.groups) / float64(a.groups)
		fmt.Printf("\nGrowth %d -> %d groups (x%.0f): scrape steady x%.2f, kadm.Lag warm x%.2f; scrape cold x%.2f, kadm.Lag cold x%.2f\n",
			a.groups, b.groups, g, ratio(b.scrapeWarm, a.scrapeWarm), ratio(b.lagWarm, a.lagWarm),
			ratio(b.scrapeCold, a.scrapeCold), ratio(b.lagCold, a.lagCold))
	}
	fmt.Printf("Peak RSS of the measured process: %s (the broker is a child process)\n", mb(peakRSS()))
	for _, r := range rows {
		fmt.Printf("Seeding %d groups took %s\n", r.groups, r.seedTook.Round(time.Millisecond))
	}
}

func scrapeOne(addrs []string, groups, partitions, topics, records, batch, reps int) (scrapeRow, error) {
	r := scrapeRow{groups: groups}
	k := &config.Kafka{Brokers: addrs, Groups: []string{"/g.*/"}, Deadline: 10 * time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	t0 := time.Now()
	names, err := seed(ctx, k, groups, partitions, topics, records, batch)
	if err != nil {
		return r, err
	}
	r.seedTook = time.Since(t0)
	fmt.Fprintf(os.Stderr, "seeded %d groups in %s\n", groups, r.seedTook.Round(time.Millisecond))

	dir, err := os.MkdirTemp("", "kafkabench-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	cfgFile := filepath.Join(dir, "config.yaml")
	cfg := fmt.Sprintf("kafka:\n  bench:\n    brokers: [%s]\n    groups: [\"/g.*/\"]\n    deadline: 10m\n", strings.Join(addrs, ", "))
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return r, err
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	srv, err := web.New(sctx, web.Options{ConfigFile: cfgFile, ScrapeTimeout: 60 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return r, fmt.Errorf("start exporter: %w", err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	hc := &http.Client{Timeout: 2 * time.Minute}
	// The server's first background collection; then every measured cold
	// scrape follows a Reload (a new App: new clients, empty caches).
	if _, _, err := scrapeHTTP(hc, hs.URL); err != nil {
		return r, err
	}

	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return r, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return r, err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	var lagCold, scrapeCold, lagWarm, scrapeWarm []time.Duration
	var cpu [4][]time.Duration
	for i := 0; i < reps; i++ {
		cl, err := kafkaclient.New(k)
		if err != nil {
			return r, err
		}
		adm := kadm.NewClient(cl)
		d, err := timeLag(ctx, adm, names)
		if err != nil {
			return r, err
		}
		lagCold, cpu[0] = append(lagCold, d), append(cpu[0], lastCPU)
		if err := srv.Reload(); err != nil {
			return r, err
		}
		c0 := cpuTime()
		d, n, err := scrapeHTTP(hc, hs.URL)
		if err != nil {
			return r, err
		}
		scrapeCold, cpu[1] = append(scrapeCold, d), append(cpu[1], cpuTime()-c0)
		r.series = n
		for j := 0; j < 3; j++ {
			d, err := timeLag(ctx, adm, names)
			if err != nil {
				return r, err
			}
			lagWarm, cpu[2] = append(lagWarm, d), append(cpu[2], lastCPU)
			c0 := cpuTime()
			d, _, err = scrapeHTTP(hc, hs.URL)
			if err != nil {
				return r, err
			}
			scrapeWarm, cpu[3] = append(scrapeWarm, d), append(cpu[3], cpuTime()-c0)
		}
		cl.Close()
	}
	if r.series < 4*groups {
		return r, fmt.Errorf("scrape exported %d outbox_consumer series for %d groups", r.series, groups)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if after.HeapAlloc > before.HeapAlloc {
		r.heapInUse = after.HeapAlloc - before.HeapAlloc
		r.heapPerGroup = r.heapInUse / uint64(groups)
	}
	r.lagCold, r.scrapeCold, r.lagWarm, r.scrapeWarm = median(lagCold), median(scrapeCold), median(lagWarm), median(scrapeWarm)
	for i := range cpu {
		r.cpu[i] = median(cpu[i])
	}
	return r, nil
}

// scrapeHTTP GETs /metrics, reads the whole body, and counts the
// consumer series; a scrape whose Kafka collector failed is an error.
func scrapeHTTP(hc *http.Client, base string) (time.Duration, int, error) {
	start := time.Now()
	resp, err := hc.Get(base + "/metrics")
	if err != nil {
		return 0, 0, fmt.Errorf("scrape: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err != nil || resp.StatusCode != http.StatusOK {
		return d, 0, fmt.Errorf("scrape: status %d: %v", resp.StatusCode, err)
	}
	s := string(body)
	if !strings.Contains(s, `outbox_exporter_collector_success{collector="kafka",target="bench"} 1`) {
		return d, 0, fmt.Errorf("scrape: the kafka collector did not succeed")
	}
	return d, strings.Count(s, "\noutbox_consumer_"), nil
}
