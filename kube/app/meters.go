package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// meters is the application's Prometheus registry and the HTTP instruments in it.
type meters struct {
	registry *prometheus.Registry
	duration *prometheus.HistogramVec
	requests *prometheus.CounterVec
	inFlight *prometheus.GaugeVec
}

// latencyBuckets: 51 bounds from 1 ms to 10 s, each 1.2 times the one before, so that
// histogram_quantile's interpolation inside one bucket is off by at most 20 % anywhere a p99
// may fall (a few ms unloaded, seconds when throttled hard).
var latencyBuckets = prometheus.ExponentialBucketsRange(0.001, 10, 51)

// otherPath labels every path the application does not serve, so a scan of random URLs cannot
// grow the number of series.
const otherPath = "other"

func newMeters(version string, held *ballast) *meters {
	m := &meters{
		registry: prometheus.NewRegistry(),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "http_request_duration_seconds",
			Help:    "Time from a request's headers read to its response written, by path and status code.",
			Buckets: latencyBuckets,
		}, []string{"path", "code"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_requests_total",
			Help: "Requests answered, by path and status code.",
		}, []string{"path", "code"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "http_requests_in_flight",
			Help: "Requests being served now, by path.",
		}, []string{"path"}),
	}
	m.registry.MustRegister(
		m.duration, m.requests, m.inFlight,
		// The runtime/metrics of the GC (including go_gc_gogc_percent and
		// go_gc_gomemlimit_bytes), the heap and the scheduler (go_sched_gomaxprocs_threads).
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.MetricsGC, collectors.MetricsMemory, collectors.MetricsScheduler,
		)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "app_ballast_bytes",
			Help: "Memory held on purpose (ALLOC_MB and POST /alloc).",
		}, func() float64 { return float64(held.bytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "app_info",
			Help:        "The application's version (always 1).",
			ConstLabels: prometheus.Labels{"version": version},
		}, func() float64 { return 1 }),
	)
	return m
}

// instrument serves routes (plus /metrics) and measures every request under its path's label.
func (m *meters) instrument(routes map[string]http.Handler) http.Handler {
	mux := http.NewServeMux()
	routes["/metrics"] = promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
	for path, handler := range routes {
		mux.Handle(path, m.measured(path, handler))
	}
	mux.Handle("/", m.measured(otherPath, http.NotFoundHandler()))
	return mux
}

func (m *meters) measured(path string, handler http.Handler) http.Handler {
	labels := prometheus.Labels{"path": path}
	return promhttp.InstrumentHandlerInFlight(m.inFlight.With(labels),
		promhttp.InstrumentHandlerDuration(m.duration.MustCurryWith(labels),
			promhttp.InstrumentHandlerCounter(m.requests.MustCurryWith(labels), handler)))
}
