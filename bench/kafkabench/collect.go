package main

// Collection mode (without -scrape): the Kafka collector's Update alone
// against one bare kadm.Lag.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/outbox-exporter/outbox_exporter/collectors/kafka"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
)

// The five timings of a row, in the order of its tables.
const (
	lagCold = iota
	collCold
	lagWarm
	collSteady
	collMoved
)

type row struct {
	groups int
	// med, fast and cpu are by lagCold ... collMoved: medians and
	// fastest of wall time, medians of CPU time.
	med, fast, cpu                             [5]time.Duration
	allocCold, allocSteady, retained, peakHeap uint64
	lagAllocCold, lagAllocWarm                 uint64
}

// samples are one size's measurements, wall and CPU, by timing.
type samples struct {
	wall, cpu [5][]time.Duration
}

func (s *samples) add(i int, d time.Duration) {
	s.wall[i], s.cpu[i] = append(s.wall[i], d), append(s.cpu[i], lastCPU)
}

func run(groups int, o options) (row, error) {
	r := row{groups: groups}
	addrs, stop, err := startCluster(o.brokers)
	if err != nil {
		return r, err
	}
	defer stop()
	k := &config.Kafka{Brokers: addrs, Groups: []string{"/g.*/"}, Deadline: 10 * time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	names, err := seed(ctx, k, groups, o.partitions, o.topics, o.records, o.batch, false)
	if err != nil {
		return r, err
	}
	fmt.Fprintf(os.Stderr, "seeded %d groups\n", groups)
	stopProfile, err := startProfile()
	if err != nil {
		return r, err
	}
	defer stopProfile()

	var s samples
	for i := 0; i < o.reps; i++ {
		if err := collectRep(ctx, k, names, o.records, i, &r, &s); err != nil {
			return r, err
		}
	}
	for i := range s.wall {
		r.med[i] = median(s.wall[i])
		r.fast[i] = s.wall[i][0] // sorted by median
		r.cpu[i] = median(s.cpu[i])
	}
	return r, nil
}

// collectRep measures one repetition: cold on new clients, three steady
// pairs, then a collection after 10% of the groups moved; and the
// collector's retained heap.
func collectRep(ctx context.Context, k *config.Kafka, names []string, records, rep int, r *row, s *samples) error {
	cl, err := kafkaclient.New(k)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	r.lagAllocCold, err = measureLag(ctx, adm, names, lagCold, s)
	if err != nil {
		return err
	}
	coll, err := kafka.NewCollector("bench", k, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	runtime.GC()
	if r.allocCold, err = measureCollect(ctx, coll, len(names), collCold, r, s); err != nil {
		return err
	}
	for j := 0; j < 3; j++ {
		if r.lagAllocWarm, err = measureLag(ctx, adm, names, lagWarm, s); err != nil {
			return err
		}
		if r.allocSteady, err = measureCollect(ctx, coll, len(names), collSteady, r, s); err != nil {
			return err
		}
	}
	// 10% of the groups commit again: only their moved offsets are read.
	if err := moveCommits(ctx, cl, names[:max(1, len(names)/10)], records, rep); err != nil {
		return err
	}
	if _, err := measureCollect(ctx, coll, len(names), collMoved, r, s); err != nil {
		return err
	}
	runtime.GC()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	withCache := ms0.HeapAlloc
	coll.Close()
	coll = nil
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	if withCache > ms1.HeapAlloc {
		r.retained = max(r.retained, withCache-ms1.HeapAlloc)
	}
	return nil
}

// measureLag times one kadm.Lag as sample i and returns its allocations.
func measureLag(ctx context.Context, adm *kadm.Client, names []string, i int, s *samples) (uint64, error) {
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	d, err := timeLag(ctx, adm, names)
	if err != nil {
		return 0, err
	}
	runtime.ReadMemStats(&ms1)
	s.add(i, d)
	return ms1.TotalAlloc - ms0.TotalAlloc, nil
}

// measureCollect times one Update as sample i and returns its
// allocations; fewer than two series per group is an error.
func measureCollect(ctx context.Context, coll *kafka.Collector, groups, i int, r *row, s *samples) (uint64, error) {
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	d, n, err := timeCollect(ctx, coll)
	if err != nil {
		return 0, err
	}
	runtime.ReadMemStats(&ms1)
	r.peakHeap = max(r.peakHeap, ms1.HeapAlloc)
	if n < 2*groups {
		return 0, fmt.Errorf("collection sent %d series for %d groups", n, groups)
	}
	s.add(i, d)
	return ms1.TotalAlloc - ms0.TotalAlloc, nil
}

// lastCPU is the process CPU time (user+system, kfake's share included)
// the last timed call took: less disturbed by other load than wall time.
var lastCPU time.Duration

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func timeLag(ctx context.Context, adm *kadm.Client, groups []string) (time.Duration, error) {
	c0 := cpuTime()
	start := time.Now()
	lags, err := adm.Lag(ctx, groups...)
	d := time.Since(start)
	lastCPU = cpuTime() - c0
	if err != nil {
		return d, fmt.Errorf("kadm.Lag: %w", err)
	}
	if err := lags.Error(); err != nil {
		return d, fmt.Errorf("kadm.Lag: %w", err)
	}
	if len(lags) != len(groups) {
		return d, fmt.Errorf("kadm.Lag: %d groups, want %d", len(lags), len(groups))
	}
	return d, nil
}

func timeCollect(ctx context.Context, c *kafka.Collector) (time.Duration, int, error) {
	ch := make(chan prometheus.Metric, 1<<14)
	done := make(chan int)
	go func() {
		n := 0
		for range ch {
			n++
		}
		done <- n
	}()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c0 := cpuTime()
	start := time.Now()
	err := c.Update(sctx, ch)
	d := time.Since(start)
	lastCPU = cpuTime() - c0
	close(ch)
	n := <-done
	if err != nil {
		return d, n, fmt.Errorf("collect: %w", err)
	}
	return d, n, nil
}
