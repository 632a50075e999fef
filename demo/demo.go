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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultFaultEvery is how often the CLI injects a fault by default.
const DefaultFaultEvery = time.Minute

// Options configures a demo pipeline. Zero values take the defaults named
// on each field, except FaultEvery.
type Options struct {
	// DatabaseURL names the PostgreSQL server to use (e.g. DATABASE_URL).
	// Empty: LocalURL if it answers, else a throwaway cluster made with
	// the local initdb.
	DatabaseURL string
	// LocalURL is the server tried when DatabaseURL is empty. Default
	// DefaultLocalURL.
	LocalURL string
	// Database is the database the demo drops, creates and owns. Default
	// outbox_demo.
	Database string
	// DropOnClose drops Database when the pipeline closes; otherwise it
	// stays for inspection until the next start.
	DropOnClose bool
	// KafkaBrokers names a real cluster; empty starts an in-process kfake
	// cluster on 127.0.0.1.
	KafkaBrokers []string
	// Topic the relays publish to. Default messages.
	Topic string

	// FaultEvery is the pause between scripted faults; 0 injects none
	// (InjectFault still works). The CLI default is DefaultFaultEvery.
	FaultEvery time.Duration

	// Rate is how many messages a second the writers commit. Default 3.
	Rate float64
	// EditShare is the share of writes that edit a recent message (a v2
	// event) instead of creating one. Default 0.3; negative for none.
	EditShare float64
	// Relays is the number of relays. Default 2.
	Relays int
	// PollInterval is how long an idle relay waits. Default 200ms.
	PollInterval time.Duration
	// LeaseTTL is the claim lease. Default 15s.
	LeaseTTL time.Duration
	// ReclaimAfter is how long past its expiry a lease must be before
	// another relay takes the row back. Default 90s, so a crashed relay's
	// row stays visible (lease_expired, then past its deadline) for
	// longer than an alert's `for: 1m`.
	ReclaimAfter time.Duration
	// UnknownBackoff is the wait before retrying a publish whose result is
	// unknown. Default 2m: the audit (a 10m window cut into time buckets
	// of 10-20s, 15s grace, a comparison every 30s) sees the row unmarked
	// while its event is on the topic within about a minute; the rest
	// keeps it visible.
	UnknownBackoff time.Duration
	// MaxAttempts before a row is ABANDONED. Default 5.
	MaxAttempts int
	// StallFor is how long a consumer stall lasts. Default NotifyDeadline
	// plus two minutes: the lag stays past its deadline for two minutes.
	StallFor time.Duration
	// OrderStallFor is how long the relay of an order_overtaken fault
	// holds the overtaken event after its successor was published.
	// Default 6m: longer than the 5m for: of OutboxOutOfOrderEvents.
	OrderStallFor time.Duration

	// OutboxDeadline is the outbox notification deadline. Default 30s.
	OutboxDeadline time.Duration
	// GroupDeadline is the lag deadline of search-index. Default 1m.
	GroupDeadline time.Duration
	// NotifyDeadline is the lag deadline of notify. Default 30s.
	NotifyDeadline time.Duration
	// ReconcileSchedule of the search_index job. Default "@every 30s".
	ReconcileSchedule string
	// ReconcileGrace of the search_index job. Default 20s.
	ReconcileGrace time.Duration
	// AuditGrace of the outbox audit. Default 15s.
	AuditGrace time.Duration
	// AuditWindow of the outbox audit. Default 10m: the audit places a
	// record in a time bucket, a fixed share of its window, and judges an
	// unmarked row only after its bucket ends, so a shorter window judges
	// sooner.
	AuditWindow time.Duration

	// Out receives the announcements for the person watching. Default
	// io.Discard.
	Out io.Writer
}

func (o *Options) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if o.Database == "" {
		o.Database = "outbox_demo"
	}
	if o.LocalURL == "" {
		o.LocalURL = DefaultLocalURL
	}
	if o.Topic == "" {
		o.Topic = "messages"
	}
	if o.Rate == 0 {
		o.Rate = 3
	}
	if o.EditShare == 0 {
		o.EditShare = 0.3
	}
	if o.Relays <= 0 {
		o.Relays = 2
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 5
	}
	def(&o.PollInterval, 200*time.Millisecond)
	def(&o.LeaseTTL, 15*time.Second)
	def(&o.ReclaimAfter, 90*time.Second)
	def(&o.UnknownBackoff, 2*time.Minute)
	def(&o.OutboxDeadline, 30*time.Second)
	def(&o.GroupDeadline, time.Minute)
	def(&o.NotifyDeadline, 30*time.Second)
	def(&o.StallFor, o.NotifyDeadline+2*time.Minute)
	def(&o.OrderStallFor, 6*time.Minute)
	def(&o.ReconcileGrace, 20*time.Second)
	def(&o.AuditGrace, 15*time.Second)
	def(&o.AuditWindow, 10*time.Minute)
	if o.ReconcileSchedule == "" {
		o.ReconcileSchedule = "@every 30s"
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
}

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
func recreateDatabase(ctx context.Context, adminURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect to the server: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("drop database %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return withDatabase(adminURL, name)
}

func dropDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to the server: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// schema is the demo's tables and the indexes the exporter's queries want.
const schema = `
CREATE TABLE messages (
	id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	version    int NOT NULL DEFAULT 1,
	body       text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX messages_created_at ON messages (created_at);

CREATE TABLE outbox (
	event_id        text PRIMARY KEY,
	message_id      bigint NOT NULL,
	message_version int NOT NULL,
	event_type      text NOT NULL,
	topic           text NOT NULL,
	status          text NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'CLAIMED', 'PUBLISHED', 'ABANDONED')),
	created_at      timestamptz NOT NULL DEFAULT now(),
	published_at    timestamptz,
	lease_until     timestamptz,
	claimed_by      text,
	attempts        int NOT NULL DEFAULT 0,
	last_error      text,
	next_attempt_at timestamptz,
	receipt         text,
	UNIQUE (message_id, message_version)
);
-- The relays' claim query.
CREATE INDEX outbox_unpublished_created_at ON outbox (created_at) WHERE status IN ('PENDING', 'CLAIMED');
-- The indexes outbox_exporter check asks for.
CREATE INDEX outbox_exporter_messages_unpublished ON outbox (event_type, topic, created_at)
	INCLUDE (status, lease_until, attempts) WHERE status IN ('PENDING', 'CLAIMED');
CREATE INDEX outbox_exporter_messages_lease ON outbox (lease_until)
	INCLUDE (event_id, status, attempts, created_at, event_type, topic) WHERE status IN ('PENDING', 'CLAIMED') AND status IN ('CLAIMED');
CREATE INDEX outbox_exporter_messages_claimed_by_label ON outbox (event_type, topic, lease_until)
	INCLUDE (status, attempts, created_at) WHERE status IN ('PENDING', 'CLAIMED') AND status IN ('CLAIMED');
CREATE INDEX outbox_exporter_messages_unknown ON outbox (event_type, topic, created_at)
	INCLUDE (status, lease_until, attempts) WHERE status IN ('PENDING', 'CLAIMED') AND NOT status IN ('CLAIMED')
	AND ((status = 'PENDING' AND last_error LIKE 'unknown result: %'));
CREATE INDEX outbox_exporter_messages_unclassified ON outbox (event_type, topic)
	INCLUDE (status) WHERE (status IS NULL OR NOT status IN ('PENDING', 'CLAIMED', 'PUBLISHED', 'ABANDONED'));
CREATE INDEX outbox_abandoned_created_at ON outbox (created_at) WHERE status = 'ABANDONED';
CREATE INDEX outbox_published_at ON outbox (published_at) WHERE published_at IS NOT NULL;

CREATE TABLE search_index (
	message_id bigint PRIMARY KEY,
	version    int NOT NULL,
	event_id   text NOT NULL,
	indexed_at timestamptz NOT NULL DEFAULT now()
);
`

// startKafka starts the in-process cluster, or makes sure the topic
// exists on the real one.
func (p *Pipeline) startKafka(ctx context.Context) error {
	p.brokers = p.opts.KafkaBrokers
	if len(p.brokers) == 0 {
		port, err := freePort()
		if err != nil {
			return err
		}
		p.fake, err = kfake.NewCluster(
			kfake.NumBrokers(1),
			kfake.Ports(port),
			kfake.ListenFn(loopbackListen),
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

// loopbackListen makes kfake listen on 127.0.0.1 even when it asks for
// all interfaces.
func loopbackListen(network, addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.Listen(network, net.JoinHostPort(host, port))
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

// AnnounceExporter tells the person watching where the exporter serves
// (baseURL such as http://127.0.0.1:9187) and what to open.
func (p *Pipeline) AnnounceExporter(baseURL string) {
	p.say(exporterGuide(strings.TrimRight(baseURL, "/"), p.opts))
}

func exporterGuide(base string, o Options) string {
	return fmt.Sprintf("The exporter watches the pipeline at %[1]s/ . Open:\n"+
		"  %[1]s/                                 the on-call page: every outbox, group, reconcile job and audit against its deadline\n"+
		"  %[1]s/metrics                          the metrics Prometheus scrapes (outbox_*)\n"+
		"  %[1]s/api/v1/stuck?outbox=messages     the oldest unpublished rows\n"+
		"  %[1]s/api/v1/reconcile?job=search_index the last reconcile findings (every %[2]s)\n"+
		"  %[1]s/api/v1/audit?outbox=messages     ids published but not on the topic, or on the topic but not marked\n"+
		"Each fault is announced here with the metric to watch. Stop with Ctrl-C.\n", base, o.ReconcileSchedule)
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
