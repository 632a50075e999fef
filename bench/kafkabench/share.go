package main

// The share-group arm of -scrape (-share): the same groups as share groups
// (KIP-932), their share-partition start offsets set where the consumer
// arm commits, against what kafka-share-groups --describe asks the broker.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
)

// seriesPrefix is the name prefix of the series the scrape must hold per
// group.
func seriesPrefix(share bool) string {
	if share {
		return "outbox_share_group_"
	}
	return "outbox_consumer_"
}

// minSeries is how many series of seriesPrefix a group has at least: a
// consumer group's lag in messages and seconds, its retention loss and
// uncommitted partitions; a share group's lag in messages and seconds.
func minSeries(share bool) int {
	if share {
		return 2
	}
	return 4
}

// timeShares is the share arm's baseline: DescribeShareGroups and
// DescribeShareGroupOffsets at once, the two requests of
// kafka-share-groups --describe, through kadm.
func timeShares(ctx context.Context, adm *kadm.Client, groups []string) (time.Duration, error) {
	if shareChunks > 0 {
		return timeSharesChunked(ctx, groups)
	}
	c0 := cpuTime()
	start := time.Now()
	var (
		wg               sync.WaitGroup
		desc             kadm.DescribedShareGroups
		offs             kadm.DescribedShareGroupsOffsets
		descErr, offsErr error
	)
	wg.Add(2)
	go func() { defer wg.Done(); desc, descErr = adm.DescribeShareGroups(ctx, groups...) }()
	go func() { defer wg.Done(); offs, offsErr = adm.DescribeShareGroupOffsets(ctx, groups...) }()
	wg.Wait()
	d := time.Since(start)
	lastCPU = cpuTime() - c0
	for _, err := range []error{descErr, offsErr} {
		if err != nil {
			return d, fmt.Errorf("describe share groups: %w", err)
		}
	}
	if len(desc) != len(groups) || len(offs) != len(groups) {
		return d, fmt.Errorf("describe share groups: %d described, %d with offsets, want %d", len(desc), len(offs), len(groups))
	}
	for _, g := range groups {
		if err := offs[g].Err; err != nil {
			return d, fmt.Errorf("share group offsets of %s: %w", g, err)
		}
	}
	return d, nil
}

// baselineOpts are the baseline client's options: for share groups, the
// 30 s a request may take that Kafka's own admin client (and so
// kafka-share-groups) allows by default (request.timeout.ms): Apache
// Kafka takes seconds to answer DescribeShareGroupOffsets, longer than
// the exporter's default client waits.
func baselineOpts(share bool) []kgo.Opt {
	if !share {
		return nil
	}
	return []kgo.Opt{kgo.RequestTimeoutOverhead(30 * time.Second), kgo.RetryTimeout(30 * time.Second)}
}

// sharesSettled waits, up to two minutes, until one share describe of
// every group answers: Apache Kafka's share coordinator loads the state of
// new share groups lazily, and the first answers time out.
func sharesSettled(ctx context.Context, k *config.Kafka, names []string) error {
	cl, err := kafkaclient.New(k, baselineOpts(true)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := newSharePool(k); err != nil {
		return err
	}
	start := time.Now()
	for {
		_, err := timeShares(ctx, adm, names)
		if err == nil {
			fmt.Fprintf(os.Stderr, "share groups answered after %s\n", time.Since(start).Round(time.Millisecond))
			return nil
		}
		if time.Since(start) > 2*time.Minute || ctx.Err() != nil {
			return fmt.Errorf("share groups never answered: %w", err)
		}
		fmt.Fprintf(os.Stderr, "share groups not answering yet: %v\n", err)
	}
}

// writeHeapProfile writes the heap profile (after the GC that measured
// the exporter's heap) to path.GROUPS; nothing when path is empty.
func writeHeapProfile(path string, groups int) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(fmt.Sprintf("%s.%d", path, groups))
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return nil
}

// shareChunks, with -share-chunks N, makes the share baseline ask as the
// exporter does: N groups per offsets request (the exporter asks 1),
// each connection of sharePool (-share-conns, the exporter's 4) asking its
// next chunk when the last is answered, the describes 200 groups a
// request; the pool is kept for the broker's run (its "cold" asks reuse
// it). One request naming 10,000 share groups is not answered by Apache
// Kafka within 30 s.
var (
	shareChunks int
	shareConns  int
	sharePool   []*kadm.Client
	sharePoolCl []*kgo.Client
)

// shareDescChunk is how many groups one describe of the chunked baseline
// names, as the exporter's.
const shareDescChunk = 200

func init() {
	flag.IntVar(&shareConns, "share-conns", 4, "with -share-chunks: connections asking share-group offsets at once, one request each at a time (the exporter's 4)")
}

func newSharePool(k *config.Kafka) error {
	if shareChunks <= 0 {
		return nil
	}
	for _, cl := range sharePoolCl {
		cl.Close()
	}
	sharePool, sharePoolCl = nil, nil
	for i := 0; i < max(shareConns, 1); i++ {
		cl, err := kafkaclient.New(k, baselineOpts(true)...)
		if err != nil {
			return err
		}
		sharePoolCl = append(sharePoolCl, cl)
		sharePool = append(sharePool, kadm.NewClient(cl))
	}
	return nil
}

// timeSharesChunked is timeShares in chunks of shareChunks groups, the
// two describes of every chunk at once, at most one offsets request per
// pooled connection at a time.
func timeSharesChunked(ctx context.Context, groups []string) (time.Duration, error) {
	c0 := cpuTime()
	start := time.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next = make(chan []string)
	)
	note := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for _, adm := range sharePool {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for part := range next {
				offs, err := adm.DescribeShareGroupOffsets(ctx, part...)
				if err == nil && len(offs) != len(part) {
					err = fmt.Errorf("%d groups with offsets, want %d", len(offs), len(part))
				}
				if err == nil {
					err = offs.Error()
				}
				if err != nil {
					note(err)
				}
			}
		}()
	}
	for i := 0; i < len(groups); i += shareDescChunk {
		part := groups[i:min(i+shareDescChunk, len(groups))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			desc, err := sharePool[0].DescribeShareGroups(ctx, part...)
			if err == nil && len(desc) != len(part) {
				err = fmt.Errorf("%d groups described, want %d", len(desc), len(part))
			}
			if err != nil {
				note(err)
			}
		}()
	}
	for i := 0; i < len(groups); i += shareChunks {
		next <- groups[i:min(i+shareChunks, len(groups))]
	}
	close(next)
	wg.Wait()
	d := time.Since(start)
	lastCPU = cpuTime() - c0
	if len(errs) > 0 {
		if partialOK {
			baselineFailed += len(errs)
			fmt.Fprintf(os.Stderr, "baseline: %d chunks failed: %v\n", len(errs), errs[0])
			return d, nil
		}
		return d, fmt.Errorf("describe share groups (%d chunks failed): %w", len(errs), errs[0])
	}
	return d, nil
}

// With -partial-ok a scrape whose Kafka collector was partial, and a
// chunk of the share baseline that failed, are counted, not the end of
// the run: on Apache Kafka with thousands of share groups on a loaded
// machine a group's lag sometimes takes the broker past 20-30 s (its
// retry backoffs, see bench/kafka.md), and the run then measures what
// answers. Every measured sample and these counts go to stderr as they
// are taken, so a later failure does not lose them.
var (
	partialOK      bool
	partialScrapes int
	baselineFailed int
)

func init() {
	flag.BoolVar(&partialOK, "partial-ok", false, "with -scrape: count partial scrapes and failed baseline chunks instead of failing the run")
}

// reportRow writes a size's samples and medians to stderr as soon as
// they are measured.
func reportRow(r scrapeRow, wall, cpu [4][]time.Duration) {
	fmt.Fprintf(os.Stderr, "groups %d: samples wall %v cpu %v; medians baseline cold %s scrape cold %s baseline warm %s scrape steady %s; cpu %v; series %d; heap per group %d B; partial scrapes so far %d, failed baseline chunks so far %d; load %s\n",
		r.groups, wall, cpu, ms(r.lagCold), ms(r.scrapeCold), ms(r.lagWarm), ms(r.scrapeWarm), r.cpu, r.series, r.heapPerGroup, partialScrapes, baselineFailed, loadAvg())
}
