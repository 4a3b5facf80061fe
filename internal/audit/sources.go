package audit

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"

	"github.com/airlockrun/airlock/internal/daemon/link"
	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/store"
)

// FlowSink records the gateway's egress decisions into the tenants' audit logs.
type FlowSink struct{ Sink Func }

var _ gateway.FlowSink = FlowSink{}

// Record implements gateway.FlowSink.
func (s FlowSink) Record(f gateway.Flow) {
	if f.TenantID != "" {
		s.Sink(FlowEntry(f))
	}
}

// FlowEntry is the audit entry of an egress flow.
func FlowEntry(f gateway.Flow) store.AuditEntry {
	target := net.JoinHostPort(f.DstIP.String(), strconv.Itoa(int(f.DstPort)))
	if f.Host != "" {
		target = f.Host + " (" + target + ")"
	}
	d := map[string]any{"rule": f.Rule, "bytes_sent": f.BytesSent, "bytes_received": f.BytesReceived}
	for k, v := range map[string]string{"reason": f.Reason, "method": f.Method, "path": f.Path, "binding": f.Binding, "error": f.Error} {
		if v != "" {
			d[k] = v
		}
	}
	return store.AuditEntry{TenantID: f.TenantID, Time: f.End, Kind: store.AuditEgress, Actor: f.SandboxID, Action: f.Protocol,
		Target: target, Result: f.Decision, Detail: jsonDetail(d)}
}

// DaemonAudit is a link.Audit that records a sandbox's daemon channel messages into its tenant's
// audit log: requests, responses, events, cancels and closes. Data and window frames (process output,
// file contents in flight, flow control) stay in the node's per-sandbox log only.
type DaemonAudit struct {
	Tenant, Sandbox string
	Sink            Func
}

// Record implements link.Audit.
func (a DaemonAudit) Record(e link.Entry) {
	if e.Type == "data" || e.Type == "window" || a.Tenant == "" {
		return
	}
	result := "ok"
	if e.Error != "" {
		result = e.Error
	}
	d := map[string]any{"direction": e.Direction, "type": e.Type, "stream": e.Stream}
	if e.Args != nil {
		d["args"] = e.Args
	}
	if e.Event != "" {
		d["event"] = e.Event
	}
	action := e.Op
	if action == "" {
		action = e.Type
	}
	a.Sink(store.AuditEntry{TenantID: a.Tenant, Time: e.Time, Kind: store.AuditDaemon, Actor: a.Sandbox, Action: action,
		Target: fmt.Sprintf("stream %d", e.Stream), Result: result, Detail: jsonDetail(d)})
}

// Tee is a link.Audit that records each entry into every one of its audits.
type Tee []link.Audit

// Record implements link.Audit.
func (t Tee) Record(e link.Entry) {
	for _, a := range t {
		a.Record(e)
	}
}

func jsonDetail(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}
