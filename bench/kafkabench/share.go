package main

// The share-group arm of -scrape (-share): the same groups as share groups
// (KIP-932), their share-partition start offsets set where the consumer
// arm commits, against what kafka-share-groups --describe asks the broker.

import (
	"context"
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
