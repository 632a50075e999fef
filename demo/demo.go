// Package demo runs a self-contained transactional-outbox pipeline for
// `outbox_exporter demo`: writers that commit a message and its outbox
// row in one transaction, relays that claim rows with a lease and publish
// them to Kafka, the consumer groups search-index and notify, and scripted
// faults that break it in each way the seeds describe. Everything binds to
// 127.0.0.1; Close stops all it started.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/netutil"
	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster"
)

// Pipeline is a running demo pipeline.
type Pipeline struct {
	opts   Options
	logger *slog.Logger

	srv     *server
	dbURL   string
	pool    *pgxpool.Pool
	fake    *kfake.Cluster
	brokers []string
	clients []*kgo.Client
	// writerKafka publishes from inside a writer transaction (a fault).
	writerKafka *kgo.Client

	runCtx context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	outMu sync.Mutex

	mu         sync.Mutex
	recent     *recentIDs
	faults     []FaultRecord
	armed      *armedFault
	stallUntil time.Time
	notified   int

	// writersPaused stops the writers (tests use it to let the pipeline
	// drain).
	writersPaused atomic.Bool

	closeOnce sync.Once
	closeErr  error
}

// Start finds or makes a PostgreSQL server, recreates the demo database,
// starts Kafka unless brokers are given, and runs writers, relays,
// consumers and, if FaultEvery > 0, the fault script. ctx bounds the
// start only; Close stops the pipeline.
func Start(ctx context.Context, opts Options, logger *slog.Logger) (_ *Pipeline, err error) {
	opts.setDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Pipeline{opts: opts, logger: logger, recent: newRecentIDs(20)}
	defer func() {
		if err != nil {
			_ = p.Close()
		}
	}()
	if p.srv, err = findServer(ctx, opts.DatabaseURL, opts.LocalURL, logger); err != nil {
		return nil, err
	}
	if p.dbURL, err = recreateDatabase(ctx, p.srv.adminURL, opts.Database); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(p.dbURL)
	if err != nil {
		return nil, fmt.Errorf("parse demo database URL: %w", err)
	}
	cfg.MaxConns = int32(opts.Relays + 4)
	cfg.ConnConfig.RuntimeParams["application_name"] = "outbox_demo"
	if p.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("connect to the demo database: %w", err)
	}
	if _, err := p.pool.Exec(ctx, schema); err != nil {
		return nil, fmt.Errorf("create demo tables: %w", err)
	}
	if err := p.startKafka(ctx); err != nil {
		return nil, err
	}
	p.runCtx, p.cancel = context.WithCancel(context.Background())
	if err := p.startWorkers(p.runCtx); err != nil {
		return nil, err
	}
	p.announceStart()
	return p, nil
}

// recreateDatabase drops and creates name on the server and returns a URL
// of it.
// startKafka starts the in-process cluster, or makes sure the topic
// exists on the real one.
func (p *Pipeline) startKafka(ctx context.Context) error {
	p.brokers = p.opts.KafkaBrokers
	if len(p.brokers) == 0 {
		port, err := pgcluster.FreePort()
		if err != nil {
			return err
		}
		p.fake, err = kfake.NewCluster(
			kfake.NumBrokers(1),
			kfake.Ports(port),
			kfake.ListenFn(netutil.LoopbackListen),
			kfake.SeedTopics(3, p.opts.Topic),
		)
		if err != nil {
			return fmt.Errorf("start in-process Kafka: %w", err)
		}
		p.brokers = []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.brokers...), kgo.ClientID("outbox-demo-admin"))
	if err != nil {
		return fmt.Errorf("kafka admin client: %w", err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 3, -1, nil, p.opts.Topic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", p.opts.Topic, err)
	}
	if resp.Err != nil && !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", p.opts.Topic, resp.Err)
	}
	return nil
}

func (p *Pipeline) newClient(role string, extra ...kgo.Opt) (*kgo.Client, error) {
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(p.brokers...),
		kgo.ClientID("outbox-demo-" + role),
		kgo.RecordDeliveryTimeout(10 * time.Second),
	}, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client for %s: %w", role, err)
	}
	p.clients = append(p.clients, cl)
	return cl, nil
}

func (p *Pipeline) startWorkers(ctx context.Context) error {
	var err error
	if p.writerKafka, err = p.newClient("writer"); err != nil {
		return err
	}
	relays := make([]*relay, p.opts.Relays)
	for i := range relays {
		name := fmt.Sprintf("relay-%d", i+1)
		cl, err := p.newClient(name)
		if err != nil {
			return err
		}
		relays[i] = &relay{p: p, name: name, cl: cl}
	}
	consumers := map[string]func(context.Context, []*kgo.Record) error{
		GroupSearchIndex: p.indexRecords,
		GroupNotify:      p.notifyRecords,
	}
	groupClients := map[string]*kgo.Client{}
	for group := range consumers {
		cl, err := p.newClient(group,
			kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(p.opts.Topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.DisableAutoCommit(),
			kgo.FetchMaxWait(500*time.Millisecond),
		)
		if err != nil {
			return err
		}
		groupClients[group] = cl
	}
	p.spawn(func() { p.write(ctx) })
	for _, r := range relays {
		p.spawn(func() { r.run(ctx) })
	}
	for group, apply := range consumers {
		p.spawn(func() { p.consume(ctx, group, groupClients[group], apply) })
	}
	if p.opts.FaultEvery > 0 {
		p.spawn(func() { p.faultScript(ctx) })
	}
	return nil
}

func (p *Pipeline) spawn(f func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
}

// faultScript injects the faults in turn, one every FaultEvery.
func (p *Pipeline) faultScript(ctx context.Context) {
	t := time.NewTicker(p.opts.FaultEvery)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		kind := nextFault(n)
		fctx, cancel := context.WithTimeout(ctx, p.opts.FaultEvery)
		_, err := p.InjectFault(fctx, kind)
		cancel()
		if err != nil && ctx.Err() == nil {
			p.say(fmt.Sprintf("[%s] could not inject %s this time: %v\n", time.Now().Format("15:04:05"), kind, err))
		}
	}
}

// say writes an announcement for the person watching.
func (p *Pipeline) say(s string) {
	p.outMu.Lock()
	defer p.outMu.Unlock()
	_, _ = io.WriteString(p.opts.Out, s)
}

func (p *Pipeline) announceStart() {
	kafka := "the in-process Kafka (kfake) at " + strings.Join(p.brokers, ",")
	if p.fake == nil {
		kafka = "the Kafka cluster at " + strings.Join(p.brokers, ",")
	}
	faults := "No scripted faults"
	if p.opts.FaultEvery > 0 {
		faults = fmt.Sprintf("The first %s is healthy; then a fault every %s, in turn: %s", p.opts.FaultEvery, p.opts.FaultEvery, joinKinds(FaultKinds))
	}
	p.say(fmt.Sprintf("Demo pipeline running on PostgreSQL from %s (database %s) and %s.\n"+
		"  %.3g messages a second commit with their outbox rows; %d relays publish them to topic %s;\n"+
		"  consumer groups %s and %s read it. Deadlines: outbox %s, %s lag %s, %s lag %s.\n"+
		"  %s.\n",
		p.srv.source, p.opts.Database, kafka, p.opts.Rate, p.opts.Relays, p.opts.Topic,
		GroupSearchIndex, GroupNotify, p.opts.OutboxDeadline, GroupSearchIndex, p.opts.GroupDeadline,
		GroupNotify, p.opts.NotifyDeadline, faults))
}

func joinKinds(ks []FaultKind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// DatabaseURL returns the URL of the demo database. It may hold the
// password of the server given: do not log it.
func (p *Pipeline) DatabaseURL() string { return p.dbURL }

// Brokers returns the Kafka seed brokers the pipeline uses.
func (p *Pipeline) Brokers() []string { return append([]string(nil), p.brokers...) }

// Options returns the options in effect, defaults filled in.
func (p *Pipeline) Options() Options { return p.opts }

// ConfigYAML returns an exporter configuration for this pipeline.
func (p *Pipeline) ConfigYAML() []byte { return configYAML(p.dbURL, p.brokers, p.opts) }

// WriteConfig writes ConfigYAML to demo.yml in dir, readable by the owner
// only (the DSN may hold a password), and returns its path.
func (p *Pipeline) WriteConfig(dir string) (string, error) {
	path := filepath.Join(dir, "demo.yml")
	if err := os.WriteFile(path, p.ConfigYAML(), 0o600); err != nil {
		return "", fmt.Errorf("write demo config: %w", err)
	}
	return path, nil
}

// Close stops every goroutine, client, Kafka cluster and PostgreSQL
// process the pipeline started, and drops the database if DropOnClose.
func (p *Pipeline) Close() error {
	p.closeOnce.Do(func() {
		var errs []error
		if p.cancel != nil {
			p.cancel()
		}
		p.wg.Wait()
		for _, cl := range p.clients {
			cl.Close()
		}
		if p.fake != nil {
			p.fake.Close()
		}
		if p.pool != nil {
			p.pool.Close()
		}
		if p.opts.DropOnClose && p.dbURL != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := dropDatabase(ctx, p.srv.adminURL, p.opts.Database); err != nil {
				errs = append(errs, err)
			}
			cancel()
		}
		if err := p.srv.close(); err != nil {
			errs = append(errs, err)
		}
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}
