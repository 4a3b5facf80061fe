package nodeapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/cluster"
	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/gateway/flowlog"
	"github.com/airlockrun/airlock/internal/gateway/policy"
	"github.com/airlockrun/airlock/internal/httperr"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/snapshot"
	"github.com/airlockrun/airlock/internal/template/oci"
)

// Handler serves the node API for a Backend. Serve it over TLS with cluster.ServerTLS allowing control
// planes only: it checks nothing of the caller itself.
type Handler struct {
	b   Backend
	log *slog.Logger
	mux *http.ServeMux
}

// NewHandler returns the node API of b.
func NewHandler(b Backend, log *slog.Logger) (*Handler, error) {
	if log == nil {
		log = slog.Default()
	}
	h := &Handler{b: b, log: log, mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /node/v1/info", h.info)
	h.mux.HandleFunc("POST /node/v1/templates/check", h.checkTemplate)
	h.mux.HandleFunc("GET /node/v1/sandboxes", h.sandboxes)
	h.mux.HandleFunc("POST /node/v1/sandboxes", h.create)
	h.mux.HandleFunc("POST /node/v1/sandboxes/restore", h.restore)
	h.mux.HandleFunc("POST /node/v1/recover", h.recover)
	h.mux.HandleFunc("DELETE /node/v1/sandboxes/{id}", h.destroy)
	h.mux.HandleFunc("PUT /node/v1/sandboxes/{id}/network", h.setNetwork)
	h.mux.HandleFunc("POST /node/v1/sandboxes/{id}/snapshot", h.snapshot)
	h.mux.HandleFunc("POST /node/v1/templates/images", h.importImage)
	h.mux.HandleFunc("POST /node/v1/templates/images/pull", h.pullImage)
	h.mux.HandleFunc("POST /node/v1/templates/images/publish", h.publishImage)
	h.mux.HandleFunc("POST /node/v1/images/drop", h.dropImages)
	h.mux.HandleFunc("GET /node/v1/runtimes", h.runtimes)
	h.mux.HandleFunc("GET /node/v1/sandboxes/{id}/cpu", h.cpu)
	h.mux.HandleFunc("GET /node/v1/sandboxes/{id}/metrics", h.metrics)
	h.mux.HandleFunc("POST /node/v1/sandboxes/{id}/flows", h.flows)
	h.mux.HandleFunc("GET /node/v1/sandboxes/{id}/link", h.link)
	h.mux.HandleFunc("GET /node/v1/sandboxes/{id}/ports/{port}", h.port)
	h.mux.HandleFunc("POST /node/v1/cas/copy", h.copyCA)
	h.mux.HandleFunc("POST /node/v1/cas/rewrap", h.rewrapCAs)
	h.mux.HandleFunc("DELETE /node/v1/cas/{id}", h.forgetCA)
	return h, nil
}

// ServeHTTP serves a control plane's call. The listener admits control planes only; the role is
// checked again here, so that a listener set up wrong does not open every sandbox to other nodes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, err := verifiedPeer(r, cluster.RoleControlPlane); err != nil {
		writeError(w, err)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// answer writes v as JSON, or err.
func (h *Handler) answer(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err != nil {
		if httperr.Status(err) >= 500 {
			h.log.Warn("node API call failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
	}
	reply(w, v, err)
}

// Info describes a node.
type Info struct {
	ID string `json:"id"`
}

func (h *Handler) info(w http.ResponseWriter, r *http.Request) {
	h.answer(w, r, Info{ID: h.b.ID()}, nil)
}

type nameBody struct {
	Name string `json:"name"`
}

func (h *Handler) checkTemplate(w http.ResponseWriter, r *http.Request) {
	var b nameBody
	err := decode(r.Body, &b)
	if err == nil {
		err = h.b.CheckTemplate(r.Context(), b.Name)
	}
	h.answer(w, r, nil, err)
}

func (h *Handler) sandboxes(w http.ResponseWriter, r *http.Request) {
	ids, err := h.b.Sandboxes(r.Context())
	h.answer(w, r, ids, err)
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	var req nodecontract.CreateRequest
	err := decode(r.Body, &req)
	if err == nil {
		err = h.b.CreateSandbox(r.Context(), req)
	}
	h.answer(w, r, nil, err)
}

// maxRequestLine bounds the create request that leads a restore's body.
const maxRequestLine = 1 << 20

// restoreBody is a restore's request: the sandbox and the snapshot, with the tenant's grant.
type restoreBody struct {
	Sandbox    nodecontract.CreateRequest `json:"sandbox"`
	SnapshotID string                     `json:"snapshot_id"`
	// Grant is the tenant's snapshot grant (snapshot.Grant.MarshalBinary), for a node that must fetch
	// the image.
	Grant []byte `json:"grant,omitempty"`
}

func (h *Handler) restore(w http.ResponseWriter, r *http.Request) {
	var req restoreBody
	if err := decode(r.Body, &req); err != nil {
		h.answer(w, r, nil, err)
		return
	}
	src := nodecontract.ImageSource{SnapshotID: req.SnapshotID}
	if len(req.Grant) > 0 {
		g, err := snapshot.UnmarshalGrant(req.Sandbox.TenantID, req.Grant)
		clear(req.Grant)
		if err != nil {
			h.answer(w, r, nil, err)
			return
		}
		defer g.Clear()
		src.Grant = g
	}
	h.answer(w, r, nil, h.b.RestoreSandbox(r.Context(), req.Sandbox, src))
}

func (h *Handler) recover(w http.ResponseWriter, r *http.Request) {
	var reqs []nodecontract.RecoverRequest
	if err := decode(r.Body, &reqs); err != nil {
		h.answer(w, r, nil, err)
		return
	}
	ids, err := h.b.Recover(r.Context(), reqs)
	if ids == nil {
		ids = []string{}
	}
	h.answer(w, r, ids, err)
}

func (h *Handler) destroy(w http.ResponseWriter, r *http.Request) {
	h.answer(w, r, nil, h.b.DestroySandbox(r.Context(), r.PathValue("id")))
}

func (h *Handler) setNetwork(w http.ResponseWriter, r *http.Request) {
	var p policy.Policy
	err := decode(r.Body, &p)
	if err == nil {
		err = h.b.SetNetwork(r.Context(), r.PathValue("id"), p)
	}
	h.answer(w, r, nil, err)
}

// snapshotBody is a snapshot's request (nodecontract.SnapshotRequest).
type snapshotBody struct {
	Tenant     string            `json:"tenant"`
	SnapshotID string            `json:"snapshot"`
	Then       nodecontract.Then `json:"then"`
	IfIdle     bool              `json:"if_idle,omitempty"`
	Meta       map[string]string `json:"meta,omitempty"`
}

func (h *Handler) snapshot(w http.ResponseWriter, r *http.Request) {
	var b snapshotBody
	if err := decode(r.Body, &b); err != nil {
		h.answer(w, r, nil, err)
		return
	}
	req := nodecontract.SnapshotRequest{TenantID: b.Tenant, SnapshotID: b.SnapshotID, Then: b.Then, IfIdle: b.IfIdle, Meta: b.Meta}
	if err := req.Check(); err != nil {
		h.answer(w, r, nil, err)
		return
	}
	img, err := h.b.Snapshot(r.Context(), r.PathValue("id"), req)
	h.answer(w, r, img, err)
}

// imageBackend is a node that takes template images and shares them (node.Local).
type imageBackend interface {
	ImportImage(ctx context.Context, r io.Reader) (oci.Image, error)
	PullImage(ctx context.Context, ref string, opts oci.PullOptions) (oci.Image, error)
	PublishImage(ctx context.Context, digest string) error
}

func (h *Handler) images() (imageBackend, error) {
	ib, ok := h.b.(imageBackend)
	if !ok {
		return nil, fmt.Errorf("node %s takes no template images: %w", h.b.ID(), errdefs.ErrFailedPrecondition)
	}
	return ib, nil
}

// importImage imports the image archive the body streams (at most nodecontract.MaxImageUpload bytes).
func (h *Handler) importImage(w http.ResponseWriter, r *http.Request) {
	ib, err := h.images()
	if err != nil {
		h.answer(w, r, nil, err)
		return
	}
	img, err := ib.ImportImage(r.Context(), r.Body)
	h.answer(w, r, img, err)
}

// pullBody is a pull's request: the reference and how to reach the registry (the password only for
// the pull).
type pullBody struct {
	Ref      string `json:"ref"`
	Insecure bool   `json:"insecure,omitempty"`
	Username string `json:"username,omitempty"`
	Password []byte `json:"password,omitempty"`
}

func (h *Handler) pullImage(w http.ResponseWriter, r *http.Request) {
	ib, err := h.images()
	if err != nil {
		h.answer(w, r, nil, err)
		return
	}
	var b pullBody
	if err := decode(r.Body, &b); err != nil {
		h.answer(w, r, nil, err)
		return
	}
	defer clear(b.Password)
	img, err := ib.PullImage(r.Context(), b.Ref, oci.PullOptions{Insecure: b.Insecure, Username: b.Username, Password: b.Password})
	h.answer(w, r, img, err)
}

type digestBody struct {
	Digest string `json:"digest"`
}

func (h *Handler) publishImage(w http.ResponseWriter, r *http.Request) {
	ib, err := h.images()
	if err != nil {
		h.answer(w, r, nil, err)
		return
	}
	var b digestBody
	err = decode(r.Body, &b)
	if err == nil {
		err = oci.CheckDigest(b.Digest)
	}
	if err == nil {
		err = ib.PublishImage(r.Context(), b.Digest)
	}
	h.answer(w, r, nil, err)
}

func (h *Handler) dropImages(w http.ResponseWriter, r *http.Request) {
	var ids []string
	err := decode(r.Body, &ids)
	if err == nil {
		err = h.b.DropImages(r.Context(), ids)
	}
	h.answer(w, r, nil, err)
}

func (h *Handler) runtimes(w http.ResponseWriter, r *http.Request) {
	rs, err := h.b.Runtimes(r.Context())
	h.answer(w, r, rs, err)
}

type cpuBody struct {
	Nanos int64 `json:"nanos"`
}

func (h *Handler) cpu(w http.ResponseWriter, r *http.Request) {
	d, err := h.b.SandboxCPU(r.Context(), r.PathValue("id"))
	h.answer(w, r, cpuBody{Nanos: int64(d)}, err)
}

// metrics answers a sandbox's resource use in [start, end]: both optional, RFC 3339 times.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	var bounds [2]time.Time
	for i, k := range []string{"start", "end"} {
		if v := r.URL.Query().Get(k); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				h.answer(w, r, nil, fmt.Errorf("%s %q: want an RFC 3339 time: %w", k, v, errdefs.ErrInvalidArgument))
				return
			}
			bounds[i] = t
		}
	}
	ss, err := h.b.SandboxMetrics(r.Context(), r.PathValue("id"), bounds[0], bounds[1])
	h.answer(w, r, ss, err)
}

func (h *Handler) flows(w http.ResponseWriter, r *http.Request) {
	var f flowlog.Filter
	if err := decode(r.Body, &f); err != nil {
		h.answer(w, r, nil, err)
		return
	}
	flows, err := h.b.Flows(r.Context(), r.PathValue("id"), f)
	h.answer(w, r, flows, err)
}

type caCopyBody struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Tenant string `json:"tenant"`
}

func (h *Handler) copyCA(w http.ResponseWriter, r *http.Request) {
	var b caCopyBody
	err := decode(r.Body, &b)
	if err == nil {
		err = h.b.CopyCA(r.Context(), b.From, b.To, b.Tenant)
	}
	h.answer(w, r, nil, err)
}

type rewrapBody struct {
	Tenant string `json:"tenant"`
	Count  int    `json:"count"`
}

func (h *Handler) rewrapCAs(w http.ResponseWriter, r *http.Request) {
	var b rewrapBody
	if err := decode(r.Body, &b); err != nil {
		h.answer(w, r, nil, err)
		return
	}
	n, err := h.b.RewrapCAs(r.Context(), b.Tenant)
	h.answer(w, r, rewrapBody{Tenant: b.Tenant, Count: n}, err)
}

func (h *Handler) forgetCA(w http.ResponseWriter, r *http.Request) {
	h.b.ForgetCA(r.PathValue("id"))
	h.answer(w, r, nil, nil)
}

// link hands the connection to the sandbox's daemon channel.
func (h *Handler) link(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	h.upgrade(w, r, protoLink, func(ctx context.Context) (func(net.Conn), func(), error) {
		m, err := h.b.LinkMux(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		return m.Serve, func() {}, nil
	})
}

// port connects the caller to a port of the sandbox.
func (h *Handler) port(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		h.answer(w, r, nil, fmt.Errorf("port %q: %w", r.PathValue("port"), errdefs.ErrInvalidArgument))
		return
	}
	id := r.PathValue("id")
	h.upgrade(w, r, protoPort, func(ctx context.Context) (func(net.Conn), func(), error) {
		in, err := h.b.DialPort(ctx, id, port)
		if err != nil {
			return nil, nil, err
		}
		return func(c net.Conn) { splice(c, in) }, func() { in.Close() }, nil
	})
}

// upgrade switches the request's connection to proto once open succeeds, and hands it to the serve
// function open returned, which owns it; if the switch fails, open's abandon function undoes it.
func (h *Handler) upgrade(w http.ResponseWriter, r *http.Request, proto string, open func(ctx context.Context) (serve func(net.Conn), abandon func(), err error)) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), proto) || r.ProtoMajor != 1 {
		h.answer(w, r, nil, fmt.Errorf("want an HTTP/1.1 upgrade to %s: %w", proto, errdefs.ErrInvalidArgument))
		return
	}
	serve, abandon, err := open(r.Context())
	if err != nil {
		h.answer(w, r, nil, err)
		return
	}
	rc := http.NewResponseController(w)
	conn, brw, err := rc.Hijack()
	if err != nil {
		abandon()
		h.log.Warn("node API: hijack", "err", err)
		return
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+proto+"\r\n\r\n"); err != nil {
		abandon()
		conn.Close()
		return
	}
	serve(bufferedConn(conn, brw.Reader))
}

// bufferedConn returns conn reading first what r holds of it.
func bufferedConn(conn net.Conn, r *bufio.Reader) net.Conn {
	if r == nil || r.Buffered() == 0 {
		return conn
	}
	return &readerConn{Conn: conn, r: io.MultiReader(r, conn)}
}

type readerConn struct {
	net.Conn
	r io.Reader
}

func (c *readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// splice copies between a and b both ways until either side ends, then closes both.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Half-close where the connection can, so the other direction may finish.
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
	a.Close()
	b.Close()
}
