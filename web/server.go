// Package web serves the exporter's HTTP endpoints and owns the running
// App, swapping it on reload.
package web

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-exporter/outbox_exporter/app"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
	"github.com/outbox-exporter/outbox_exporter/web/history"
)

// Options configure a Server.
type Options struct {
	ConfigFile    string
	TelemetryPath string
	// ScrapeTimeout bounds a collection when Prometheus sends no
	// X-Prometheus-Scrape-Timeout-Seconds header.
	ScrapeTimeout time.Duration
	// TimeoutOffset is taken off Prometheus's scrape timeout so the answer
	// arrives before Prometheus gives up.
	TimeoutOffset time.Duration
	Logger        *slog.Logger
	// EnableLifecycle serves POST /-/reload (--web.enable-lifecycle);
	// without it anyone who reaches the port could make the exporter
	// reload.
	EnableLifecycle bool
	// Identity names this replica to the others when leader_election is
	// configured (app.DefaultIdentity).
	Identity string
}

// Server owns the running App and its HTTP handlers.
type Server struct {
	opts Options
	log  *slog.Logger

	mu     sync.RWMutex
	app    *app.App
	runCtx context.Context

	reloadMu   sync.Mutex
	reloadOK   prometheus.Gauge
	reloadTime prometheus.Gauge
	// staticCs are the exporter's own collectors, registered in each
	// scrape's registry with the App's: gathering two registries
	// through prometheus.Gatherers checks and sorts every series twice.
	staticCs []prometheus.Collector
	// self holds the metrics handler's own metrics (promhttp_*).
	self selfCollectors

	rec  *recorder
	gate stuckGate
}

// History of the page's trends: one hour, one point per 15 s, at most 500
// series (about 4 KB each).
const (
	historyWindow = time.Hour
	historyStep   = 15 * time.Second
	historySeries = 500
)

// New loads the configuration and builds the first App. A configuration
// that does not load is an error: the exporter does not start without one.
func New(ctx context.Context, opts Options) (*Server, error) {
	if opts.TelemetryPath == "" {
		opts.TelemetryPath = "/metrics"
	}
	if opts.ScrapeTimeout == 0 {
		opts.ScrapeTimeout = 10 * time.Second
	}
	s := &Server{opts: opts, log: opts.Logger, runCtx: ctx,
		rec: &recorder{history: history.New(historyWindow, historyStep, historySeries)}}
	s.reloadOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: vocab.ConfigReloadSuccessful,
		Help: "1 if the last load or reload of the configuration file worked; 0 means the exporter still runs the previous configuration.",
	})
	s.reloadTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: vocab.ConfigReloadSuccessTime,
		Help: "When the configuration was last loaded successfully.",
	})
	s.staticCs = []prometheus.Collector{s.reloadOK, s.reloadTime,
		versioncollector.NewCollector("outbox_exporter"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	go s.keepFresh(ctx)
	return s, nil
}

// App returns the running App.
func (s *Server) App() *app.App {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.app
}

// Reload reads the configuration file again and swaps in a new App. On any
// error the running App is kept and outbox_exporter_config_last_reload_successful
// drops to 0.
func (s *Server) Reload() error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	err := s.reload()
	if err != nil {
		s.reloadOK.Set(0)
		s.log.Error("config reload failed; keeping the running configuration", "file", s.opts.ConfigFile, "err", err)
		return err
	}
	s.reloadOK.Set(1)
	s.reloadTime.SetToCurrentTime()
	s.log.Info("config loaded", "file", s.opts.ConfigFile)
	return nil
}

func (s *Server) reload() error {
	cfg, err := config.Load(s.opts.ConfigFile)
	if err != nil {
		return err
	}
	// Parts whose config did not change keep their state (app.Rebuild).
	next, err := app.Rebuild(s.runCtx, cfg, s.log, s.App())
	if err != nil {
		return err
	}
	s.mu.Lock()
	prev := s.app
	s.app = next
	s.mu.Unlock()
	next.SetIdentity(s.opts.Identity)
	next.Start(s.runCtx)
	if prev != nil {
		prev.Close()
	}
	return nil
}

// Describe sends the descriptor of every metric the server may export:
// its own (reload state, build info, Go runtime, process) and those of the
// running App's collectors. The docs test lists them from here.
func (s *Server) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range s.staticCs {
		c.Describe(ch)
	}
	if a := s.App(); a != nil {
		a.Exporter.Describe(ch)
	}
}

// Close stops the running App.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.app != nil {
		s.app.Close()
		s.app = nil
	}
}

// Handler returns the HTTP handler for every path the exporter serves.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+s.opts.TelemetryPath, promhttp.InstrumentMetricHandler(&s.self, http.HandlerFunc(s.serveMetrics)))
	mux.HandleFunc("GET /-/healthy", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("Healthy.\n"))
	})
	mux.HandleFunc("GET /-/ready", func(w http.ResponseWriter, _ *http.Request) {
		if s.App() == nil {
			http.Error(w, "Not ready: no configuration loaded.", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("Ready.\n"))
	})
	mux.HandleFunc("POST /-/reload", func(w http.ResponseWriter, _ *http.Request) {
		if !s.opts.EnableLifecycle {
			http.Error(w, "Lifecycle API is not enabled: start the exporter with --web.enable-lifecycle.", http.StatusForbidden)
			return
		}
		if err := s.Reload(); err != nil {
			http.Error(w, "reload failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Write([]byte("Reloaded.\n"))
	})
	mux.HandleFunc("GET /{$}", s.servePage)
	s.apiRoutes(mux)
	return mux
}

// scrapeTimeout follows Prometheus's X-Prometheus-Scrape-Timeout-Seconds.
func (s *Server) scrapeTimeout(r *http.Request) time.Duration {
	if v := r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds"); v != "" {
		if secs, err := strconv.ParseFloat(v, 64); err == nil && secs > 0 {
			d := time.Duration(secs*float64(time.Second)) - s.opts.TimeoutOffset
			if d > 0 {
				return d
			}
		}
	}
	return s.opts.ScrapeTimeout
}

// scrape is a prometheus.Collector for one request: it runs the App's
// collectors under the request's deadline.
type scrape struct {
	ctx context.Context
	e   interface {
		Describe(chan<- *prometheus.Desc)
		Collect(context.Context) []prometheus.Metric
	}
}

func (c scrape) Describe(ch chan<- *prometheus.Desc) { c.e.Describe(ch) }
func (c scrape) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.e.Collect(c.ctx) {
		ch <- m
	}
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.scrapeTimeout(r))
	defer cancel()
	reg := prometheus.NewRegistry()
	opts := promhttp.HandlerOpts{
		ErrorLog:           slog.NewLogLogger(s.log.Handler(), slog.LevelError),
		ErrorHandling:      promhttp.ContinueOnError,
		DisableCompression: true, // gzip.go
		Registry:           &s.self,
	}
	h := promhttp.HandlerFor(recordingGatherer{g: reg, rec: s.rec, now: time.Now}, opts)
	reg.MustRegister(s.staticCs...)
	reg.MustRegister(s.self.collectors()...)
	if a := s.App(); a != nil {
		if err := reg.Register(scrape{ctx: ctx, e: a.Exporter}); err != nil {
			http.Error(w, "register collectors: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	serveCompressed(h, w, r)
}

// gather runs one collection outside a scrape and records it.
func (s *Server) gather(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.ScrapeTimeout)
	defer cancel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.staticCs...)
	if a := s.App(); a != nil {
		if err := reg.Register(scrape{ctx: ctx, e: a.Exporter}); err != nil {
			s.log.Error("register collectors", "err", err)
			return
		}
	}
	_, _ = recordingGatherer{g: reg, rec: s.rec, now: time.Now}.Gather()
}

// keepFresh collects in the background when nobody scraped for a history
// step, so the page and its trends stay current without Prometheus; a
// replica that only stands by does not (its page collects when viewed).
func (s *Server) keepFresh(ctx context.Context) {
	t := time.NewTicker(historyStep)
	defer t.Stop()
	s.gather(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if s.refreshDue(time.Now()) {
				s.gather(ctx)
			}
		}
	}
}

// apiError is the body of every failed API answer.
type apiError struct {
	Error string `json:"error"`
}

var errNoApp = errors.New("no configuration loaded")

// gaugeValue reads a gauge's current value.
func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		return 0
	}
	return m.GetGauge().GetValue()
}
