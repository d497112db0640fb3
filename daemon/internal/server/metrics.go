package server

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics of the daemon itself (the other packages export their own).
var (
	metricSessions = promauto.NewCounter(prometheus.CounterOpts{
		Name: "consumerd_member_sessions_total",
		Help: "Member sessions started by serve: 1 at start, +1 for each rejoin after a lost lease.",
	})
	metricHTTPRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "consumerd_http_requests_total",
		Help: "HTTP requests served, by handler and status code.",
	}, []string{"handler", "code"})
	metricHTTPDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "consumerd_http_request_duration_seconds",
		Help:    "Time to serve an HTTP request, by handler.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 9),
	}, []string{"handler"})
)

// instrument counts and times requests to h under the label handler.
func instrument(handler string, h http.Handler) http.Handler {
	return promhttp.InstrumentHandlerDuration(metricHTTPDuration.MustCurryWith(prometheus.Labels{"handler": handler}),
		promhttp.InstrumentHandlerCounter(metricHTTPRequests.MustCurryWith(prometheus.Labels{"handler": handler}), h))
}
