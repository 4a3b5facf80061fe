package gateway

import (
	"net/netip"
	"strings"
	"time"
)

// Protocols of a Flow: what the proxy found the connection to carry.
const (
	ProtoTLS  = "tls"
	ProtoHTTP = "http"
	ProtoTCP  = "tcp"
)

// Decisions of a Flow.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
)

// Bounds on the sandbox-controlled text a Flow carries, so that one record stays small whatever a
// sandbox sends.
const (
	maxFlowHost   = 255
	maxFlowPath   = 512
	maxFlowMethod = 32
	maxFlowReason = 512
)

// Flow is the audit record of one connection a sandbox opened (or tried to open) through the gateway, or
// for plain HTTP of one request on such a connection. It never holds header or body content, nor the
// query string of a path.
type Flow struct {
	// Start is when the gateway accepted the connection (for the second and later HTTP requests on a
	// connection: when the request's head arrived).
	Start time.Time `json:"start"`
	// End is when the flow ended: the connection closed, the request's response was relayed, or the
	// gateway refused.
	End time.Time `json:"end"`
	// SandboxID and TenantID name the sandbox that opened the connection and its owner.
	SandboxID string `json:"sandbox_id"`
	TenantID  string `json:"tenant_id,omitempty"`
	// SrcPort is the sandbox's source port: the HTTP requests of one connection share it.
	SrcPort uint16 `json:"src_port"`
	// DstIP is the address the gateway dialed or, when it refused, the address the sandbox dialed.
	DstIP netip.Addr `json:"dst_ip"`
	// DstPort is the destination port.
	DstPort uint16 `json:"dst_port"`
	// Host is the destination name: the TLS SNI, the HTTP Host, or the name the sandbox resolved through
	// the gateway's DNS for DstIP. Empty when there was none.
	Host string `json:"host,omitempty"`
	// Protocol is ProtoTLS, ProtoHTTP or ProtoTCP.
	Protocol string `json:"protocol"`
	// Decision is DecisionAllow or DecisionDeny: the policy's verdict. An allowed flow can still have
	// failed upstream (see Error).
	Decision string `json:"decision"`
	// Rule names what decided: a rule's name, "default", a guard ("guard:private"), or a check of the
	// gateway's own ("resolve", "mismatch", "host-changed", "malformed-http").
	Rule string `json:"rule,omitempty"`
	// Reason says why, in words.
	Reason string `json:"reason,omitempty"`
	// BytesSent counts the bytes the gateway relayed from the sandbox to the upstream; BytesReceived the
	// bytes it relayed from the upstream to the sandbox. Both are 0 for a refused flow (the gateway's own
	// 403 is not counted). For HTTP they count the request and the response as the gateway relayed them,
	// heads included (the gateway writes request heads in canonical form, so a few bytes may differ from
	// what the sandbox sent), and after a protocol switch everything relayed until the connection closed.
	BytesSent     int64 `json:"bytes_sent"`
	BytesReceived int64 `json:"bytes_received"`
	// Method and Path are the request's, for HTTP (Path without the query string).
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	// Binding names the credential binding the gateway applied to the flow. It is a name, never a value.
	// Empty until credential injection exists.
	Binding string `json:"binding,omitempty"`
	// Error says why an allowed flow failed upstream (the dial, or reading the response).
	Error string `json:"error,omitempty"`
}

// Duration is how long the flow lasted.
func (f Flow) Duration() time.Duration { return f.End.Sub(f.Start) }

// FlowSink receives the gateway's flow records, each once, when its flow ended. Record is called from
// the connection's goroutine: it must be safe for concurrent use and return quickly.
type FlowSink interface {
	Record(Flow)
}

// FlowSinks records every flow into each of its sinks in turn.
type FlowSinks []FlowSink

// Record passes f to every sink.
func (s FlowSinks) Record(f Flow) {
	for _, x := range s {
		x.Record(f)
	}
}

// clip cuts s to at most n bytes of valid UTF-8.
func clip(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
