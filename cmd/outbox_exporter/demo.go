package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	toolkit "github.com/prometheus/exporter-toolkit/web"

	"github.com/outbox-exporter/outbox_exporter/demo"
	"github.com/outbox-exporter/outbox_exporter/web"
)

// demoCmd runs a self-contained pipeline with scripted faults and the
// exporter on it, until interrupted.
func (c *cli) demoCmd(ctx context.Context, stdout io.Writer, logger *slog.Logger) int {
	say := func(format string, args ...any) { fmt.Fprintf(stdout, format+"\n", args...) }
	say("Starting the demo pipeline: PostgreSQL (DATABASE_URL, else 127.0.0.1:5432, else a throwaway cluster), Kafka (in-process unless --kafka.brokers), writers, relays and consumers...")
	p, err := demo.Start(ctx, demo.Options{
		DatabaseURL:  os.Getenv("DATABASE_URL"),
		KafkaBrokers: c.demoBrokers,
		FaultEvery:   c.demoFaultEvery,
		Out:          stdout,
	}, logger.With("part", "demo"))
	if err != nil {
		logger.Error("demo pipeline did not start", "err", err)
		return 1
	}
	defer p.Close()

	dir, err := os.MkdirTemp("", "outbox-demo-")
	if err != nil {
		logger.Error("demo config dir", "err", err)
		return 1
	}
	defer os.RemoveAll(dir)
	cfgFile := filepath.Join(dir, "outbox_exporter.yml")
	if err := os.WriteFile(cfgFile, p.ConfigYAML(), 0o600); err != nil {
		logger.Error("write demo config", "err", err)
		return 1
	}
	srv, err := web.New(ctx, web.Options{ConfigFile: cfgFile, TelemetryPath: c.telemetryPath, ScrapeTimeout: c.scrapeTimeout, TimeoutOffset: c.timeoutOffset, Logger: logger})
	if err != nil {
		logger.Error("exporter did not start on the demo", "err", err)
		return 1
	}
	defer srv.Close()

	httpSrv := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- toolkit.ListenAndServe(httpSrv, c.demoWeb, logger) }()

	base := "http://" + displayAddr((*c.demoWeb.WebListenAddresses)[0])
	fmt.Fprint(stdout, demoGuide(base, c.telemetryPath, cfgFile, p.Options().ReconcileSchedule, c.demoFaultEvery))

	return waitServed(ctx, httpSrv, errc, logger, func() { say("Stopping the demo...") })
}

// demoGuide tells the person watching the demo where the exporter serves
// (base such as http://127.0.0.1:9899), what to open, and how to
// generate dashboards and rules for the demo's config.
func demoGuide(base, telemetryPath, cfgFile, schedule string, faultEvery time.Duration) string {
	var b strings.Builder
	say := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	say("")
	say("The exporter is watching the demo pipeline. Open:")
	say("  %s/                       the on-call page: every outbox, group, reconcile job and audit against its deadline", base)
	say("  %s%s                 the metrics Prometheus scrapes (outbox_*)", base, telemetryPath)
	say("  %s/api/v1/stuck?outbox=messages   the oldest unpublished rows", base)
	say("  %s/api/v1/reconcile?job=search_index   the last reconcile findings (a run %s)", base, schedule)
	say("  %s/api/v1/audit?outbox=messages   ids published but not on the topic, or on the topic but not marked", base)
	say("The exporter's config is %s; generate dashboards and rules for it with:", cfgFile)
	say("  outbox_exporter generate --config.file=%s --out ./out", cfgFile)
	if faultEvery > 0 {
		say("A fault is injected every %s and announced here with the metric to watch. Ctrl-C stops everything.", faultEvery)
	} else {
		say("Faults are off (--demo.fault-every=0). Ctrl-C stops everything.")
	}
	say("")
	return b.String()
}

// displayAddr turns a listen address such as ":9899" into one a browser
// can open.
func displayAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}
