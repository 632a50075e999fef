// Command outbox_exporter watches transactional-outbox pipelines and tells
// on-call when an event is late, stuck, duplicated or silently lost.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	toolkit "github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/outbox-exporter/outbox_exporter/app"
	"github.com/outbox-exporter/outbox_exporter/demo"
	"github.com/outbox-exporter/outbox_exporter/web"
)

// DefaultListenAddress is the exporter's port.
const DefaultListenAddress = ":9899"

func main() {
	if version.Version == "" {
		version.Version = "0.1.0-dev"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cli holds every flag; one per process, never global.
type cli struct {
	configFile    string
	telemetryPath string
	scrapeTimeout time.Duration
	timeoutOffset time.Duration
	lifecycle     bool
	web           *toolkit.FlagConfig
	log           *promslog.Config

	reconcileJob    string
	reconcileFull   bool
	reconcileFormat string
	// reconcileUnconfirmed reports findings no column dates at once,
	// marked unconfirmed, instead of holding them for grace.
	reconcileUnconfirmed bool
	generateOut          string
	demoBrokers          []string
	demoFaultEvery       time.Duration
	demoWeb              *toolkit.FlagConfig
	discoverDSN          string
}

// exitCode carries kingpin's requested exit (after --help or --version)
// out of Parse without ending the process, so run stays testable.
type exitCode int

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			ec, ok := r.(exitCode)
			if !ok {
				panic(r)
			}
			code = int(ec)
		}
	}()
	c := &cli{log: &promslog.Config{}}
	a := kingpin.New("outbox_exporter", "Prometheus exporter for transactional-outbox pipelines: late, stuck, duplicated and silently lost events.")
	a.UsageWriter(stderr)
	a.ErrorWriter(stderr)
	a.Terminate(func(code int) { panic(exitCode(code)) })
	a.Version(version.Print("outbox_exporter"))
	a.HelpFlag.Short('h')
	a.Flag("config.file", "Path to the configuration file.").StringVar(&c.configFile)
	flag.AddFlags(a, c.log)

	cmds := c.commands(a)
	cmd, err := a.Parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "outbox_exporter: %v\n", err)
		return 2
	}
	c.log.Writer = stderr
	logger := promslog.New(c.log)

	if cmd == cmds.dem.FullCommand() {
		// The demo writes its own configuration.
		if c.telemetryPath == "" {
			c.telemetryPath = "/metrics"
		}
		if c.scrapeTimeout == 0 {
			c.scrapeTimeout = 10 * time.Second
		}
		return c.demoCmd(ctx, stdout, logger)
	}
	if cmd == cmds.disc.FullCommand() {
		return c.discoverCmd(ctx, stdout, stderr)
	}
	if c.configFile == "" {
		fmt.Fprintln(stderr, "outbox_exporter: --config.file is required")
		return 2
	}
	switch cmd {
	case cmds.serve.FullCommand():
		return c.serve(ctx, logger)
	case cmds.rec.FullCommand():
		return c.reconcileCmd(ctx, stdout, stderr, logger)
	case cmds.gen.FullCommand():
		return c.generateCmd(stdout, stderr)
	case cmds.check.FullCommand():
		return c.check(ctx, stdout, stderr, logger)
	}
	return 2
}

// commandClauses are the subcommands run dispatches on.
type commandClauses struct {
	serve, check, rec, gen, dem, disc *kingpin.CmdClause
}

// commands declares the subcommands and their flags on a, bound to c.
func (c *cli) commands(a *kingpin.Application) (x commandClauses) {
	x.serve = a.Command("serve", "Run the collectors and reconcile schedules and serve HTTP (the default).").Default()
	c.web = kingpinflag.AddFlags(x.serve, DefaultListenAddress)
	x.serve.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").StringVar(&c.telemetryPath)
	x.serve.Flag("web.enable-lifecycle", "Serve POST /-/reload (off: anyone who reaches the port could make the exporter reload).").BoolVar(&c.lifecycle)
	x.serve.Flag("scrape.timeout", "Collection deadline when Prometheus sends no X-Prometheus-Scrape-Timeout-Seconds header.").Default("10s").DurationVar(&c.scrapeTimeout)
	x.serve.Flag("scrape.timeout-offset", "Taken off Prometheus's scrape timeout so the answer arrives in time.").Default("500ms").DurationVar(&c.timeoutOffset)

	x.check = a.Command("check", "Validate the configuration, connect, and verify tables, columns, types and indexes.")

	x.rec = a.Command("reconcile", "Run reconcile now and print findings; exit 0 no gaps, 1 gaps found, 2 error.")
	x.rec.Flag("job", "Run only this job (default: every job).").StringVar(&c.reconcileJob)
	x.rec.Flag("full", "Sweep the whole key space instead of the window.").BoolVar(&c.reconcileFull)
	x.rec.Flag("format", "Output format: text or json.").Default("text").EnumVar(&c.reconcileFormat, "text", "json")
	x.rec.Flag("unconfirmed", "Report findings no column dates (a deleted authority row's target row, a target gap of an undated publication) at once, marked unconfirmed, instead of holding them until grace has passed to see that they persist.").BoolVar(&c.reconcileUnconfirmed)

	x.gen = a.Command("generate", "Write Grafana dashboards (JSON) and Prometheus rule files (YAML) made for the configuration.")
	x.gen.Flag("out", "Directory to write into.").Required().StringVar(&c.generateOut)

	x.dem = a.Command("demo", "Run a self-contained outbox pipeline with scripted faults, and the exporter on it.")
	c.demoWeb = kingpinflag.AddFlags(x.dem, "127.0.0.1:9899")
	x.dem.Flag("kafka.brokers", "Use this Kafka cluster instead of the in-process one (repeatable).").StringsVar(&c.demoBrokers)
	x.dem.Flag("demo.fault-every", "Pause between scripted faults; 0 turns them off.").Default(demo.DefaultFaultEvery.String()).DurationVar(&c.demoFaultEvery)

	x.disc = a.Command("discover", "Read a database's catalog (no rows) and print a configuration for the outbox tables found; exit 0 found, 1 none, 2 error.")
	x.disc.Flag("dsn", "The database to read (else every database of --config.file).").StringVar(&c.discoverDSN)
	return x
}

func (c *cli) serve(ctx context.Context, logger *slog.Logger) int {
	logger.Info("starting outbox_exporter", "version", version.Info(), "build", version.BuildContext())
	srv, err := web.New(ctx, web.Options{
		ConfigFile:      c.configFile,
		TelemetryPath:   c.telemetryPath,
		ScrapeTimeout:   c.scrapeTimeout,
		TimeoutOffset:   c.timeoutOffset,
		Logger:          logger,
		EnableLifecycle: c.lifecycle,
		Identity:        app.DefaultIdentity(firstAddress(c.web)),
	})
	if err != nil {
		logger.Error("cannot start", "err", err)
		return 1
	}
	defer srv.Close()

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for {
			select {
			case <-hup:
				_ = srv.Reload()
			case <-ctx.Done():
				return
			}
		}
	}()

	httpSrv := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- toolkit.ListenAndServe(httpSrv, c.web, logger) }()
	return waitServed(ctx, httpSrv, errc, logger, func() { logger.Info("shutting down") })
}

// waitServed waits until the HTTP server fails (exit code 1) or ctx ends;
// then it calls stopping and shuts the server down, giving requests in
// flight 5s (exit code 0).
func waitServed(ctx context.Context, httpSrv *http.Server, errc <-chan error, logger *slog.Logger, stopping func()) int {
	select {
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("http server failed", "err", err)
			return 1
		}
	case <-ctx.Done():
		stopping()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = httpSrv.Shutdown(sctx)
	}
	return 0
}

// firstAddress is the first --web.listen-address, "" when none.
func firstAddress(fc *toolkit.FlagConfig) string {
	if fc == nil || fc.WebListenAddresses == nil || len(*fc.WebListenAddresses) == 0 {
		return ""
	}
	return (*fc.WebListenAddresses)[0]
}
