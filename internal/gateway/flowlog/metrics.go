package flowlog

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlockrun/airlock/internal/gateway"
)

// Metrics counts flows for Prometheus. It is a gateway.FlowSink. Its counters have no per-sandbox or
// per-host labels: those are unbounded, and the flow log answers such questions.
//
//	airlock_egress_flows_total{decision="allow"|"deny"}     flows (connections; plain-HTTP requests)
//	airlock_egress_bytes_total{direction="sent"|"received"} bytes relayed: sent is sandbox to upstream
//
// A flow counts when it ends, so a long connection's bytes show when it closes.
type Metrics struct {
	flows *prometheus.CounterVec
	bytes *prometheus.CounterVec
}

// NewMetrics makes the counters and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		flows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_egress_flows_total",
			Help: "Connections (and plain-HTTP requests) sandboxes opened through the network gateway, by decision.",
		}, []string{"decision"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_egress_bytes_total",
			Help: "Bytes the network gateway relayed for sandboxes, by direction: sent (sandbox to upstream) or received.",
		}, []string{"direction"}),
	}
	for _, c := range []prometheus.Collector{m.flows, m.bytes} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register egress metrics: %w", err)
		}
	}
	// Every series exists from the start, at 0, so that rates and alerts see it before the first flow.
	m.flows.WithLabelValues(gateway.DecisionAllow)
	m.flows.WithLabelValues(gateway.DecisionDeny)
	m.bytes.WithLabelValues("sent")
	m.bytes.WithLabelValues("received")
	return m, nil
}

// Record counts f.
func (m *Metrics) Record(f gateway.Flow) {
	d := gateway.DecisionDeny
	if f.Decision == gateway.DecisionAllow {
		d = gateway.DecisionAllow
	}
	m.flows.WithLabelValues(d).Inc()
	if f.BytesSent > 0 {
		m.bytes.WithLabelValues("sent").Add(float64(f.BytesSent))
	}
	if f.BytesReceived > 0 {
		m.bytes.WithLabelValues("received").Add(float64(f.BytesReceived))
	}
}
