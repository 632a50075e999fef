package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

var profile string

// sameProcess runs kfake in the measured process. By default it runs in a
// child process, as a broker would: the measured process then holds only
// the clients, and its CPU time, allocations and memory are theirs.
var sameProcess bool

// startCluster starts kfake and returns its broker addresses.
func startCluster(brokers int) ([]string, func(), error) {
	if sameProcess {
		c, err := kfake.NewCluster(kfake.NumBrokers(brokers))
		if err != nil {
			return nil, nil, fmt.Errorf("start kfake: %w", err)
		}
		return c.ListenAddrs(), c.Close, nil
	}
	cmd := exec.Command(os.Args[0], "-serve-kfake", strconv.Itoa(brokers))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start kfake process: %w", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		return nil, nil, fmt.Errorf("read kfake addresses: %w", err)
	}
	stop := func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	}
	return strings.Fields(line), stop, nil
}

// serveKfake is the child process: a kfake cluster until stdin closes.
func serveKfake(brokers int) {
	c, err := kfake.NewCluster(kfake.NumBrokers(brokers))
	if err != nil {
		fail(fmt.Errorf("start kfake: %w", err))
	}
	defer c.Close()
	fmt.Println(strings.Join(c.ListenAddrs(), " "))
	_, _ = io.Copy(io.Discard, os.Stdin)
}

var base = time.Now().Add(-time.Hour).Truncate(time.Millisecond)

// seed creates the topics, writes records (timestamped a second apart, in
// batches as a producer would) and commits every group at its own offsets
// behind the end: each group's offsets in one OffsetCommit request (with
// share, one AlterShareGroupOffsets request setting its share-partition
// start offsets, which creates the share group), groups concurrently.
func seed(ctx context.Context, k *config.Kafka, groups, partitions, topics, records, batch int, share bool) ([]string, error) {
	cl, err := kafkaclient.New(k, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var names []string
	for t := 0; t < topics; t++ {
		names = append(names, fmt.Sprintf("t%02d", t))
	}
	if _, err := adm.CreateTopics(ctx, int32(partitions), 1, nil, names...); err != nil {
		return nil, fmt.Errorf("create topics: %w", err)
	}
	value := make([]byte, 100)
	// One ProduceSync per batch round: every partition gets batch
	// records per round, so each partition holds records/batch batches.
	for from := 0; from < records; from += batch {
		var rs []*kgo.Record
		for _, t := range names {
			for p := 0; p < partitions; p++ {
				for i := from; i < min(from+batch, records); i++ {
					rs = append(rs, &kgo.Record{Topic: t, Partition: int32(p), Value: value, Timestamp: base.Add(time.Duration(i) * time.Second)})
				}
			}
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			return nil, fmt.Errorf("produce: %w", err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	gs := make([]string, groups)
	offs := make([]kadm.Offsets, groups)
	for g := range gs {
		gs[g] = fmt.Sprintf("g%05d", g)
		offs[g] = kadm.Offsets{}
		for p := 0; p < partitions; p++ {
			offs[g].Add(kadm.Offset{Topic: names[g%topics], Partition: int32(p), At: rng.Int64N(int64(records - 1)), LeaderEpoch: -1})
		}
	}
	commit := func(ctx context.Context, g int) error {
		if !share {
			return adm.CommitAllOffsets(ctx, gs[g], offs[g])
		}
		// kadm does not retry AlterShareGroupOffsets while Apache
		// Kafka's share coordinators move or load: ask again, a
		// bounded number of times.
		var err error
		for try := 0; try < 50; try++ {
			var rs kadm.AlterShareGroupOffsetsResponses
			rs, err = adm.AlterShareGroupOffsets(ctx, gs[g], offs[g])
			if err == nil {
				err = rs.Error()
			}
			if !errors.Is(err, kerr.NotCoordinator) && !errors.Is(err, kerr.CoordinatorLoadInProgress) && !errors.Is(err, kerr.CoordinatorNotAvailable) {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		return err
	}
	if err := eachConcurrently(ctx, groups, commit); err != nil {
		return nil, err
	}
	return gs, nil
}

// seedWorkers is how many groups commit at once while seeding.
const seedWorkers = 32

// eachConcurrently runs do(0..n-1) on seedWorkers goroutines; the first
// error stops the others and is returned, naming the group.
func eachConcurrently(ctx context.Context, n int, do func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < seedWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range next {
				if err := do(ctx, g); err != nil {
					cancel(fmt.Errorf("commit group %d: %w", g, err))
					return
				}
			}
		}()
	}
	for g := 0; g < n && ctx.Err() == nil; g++ {
		select {
		case next <- g:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}

// moveCommits moves every partition's commit of groups one record on.
func moveCommits(ctx context.Context, cl *kgo.Client, groups []string, records, round int) error {
	adm := kadm.NewClient(cl)
	fetched := adm.FetchManyOffsets(ctx, groups...)
	if err := fetched.Error(); err != nil {
		return fmt.Errorf("fetch offsets: %w", err)
	}
	for _, g := range groups {
		os := kadm.Offsets{}
		fetched[g].Fetched.Each(func(o kadm.OffsetResponse) {
			at := o.At + 1
			if at >= int64(records) {
				at = int64(round % (records - 1))
			}
			os.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: at, LeaderEpoch: -1})
		})
		if err := adm.CommitAllOffsets(ctx, g, os); err != nil {
			return fmt.Errorf("commit %s: %w", g, err)
		}
	}
	return nil
}
