// Package airlock is the Go client of the Airlock API: create sandboxes, run processes in them (to
// completion, or streamed over a WebSocket with stdin, a terminal, signals and re-attach), and move files in
// and out.
//
//	c := airlock.New("http://127.0.0.1:7070", airlock.WithAPIKey(key))
//	sb, err := c.CreateSandbox(ctx, airlock.CreateSandboxRequest{TimeoutSeconds: 600})
//	res, err := c.Exec(ctx, sb.ID, airlock.ExecRequest{Cmd: []string{"python3", "-c", "print(1+1)"}})
//
// Every method takes a context first and reports API failures as *APIError, which errors.Is matches
// against ErrNotFound, ErrInvalidArgument and the other sentinels of this package.
package airlock

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
)

// DefaultBaseURL is the address of a local `airlock up`, used when New is given "".
const DefaultBaseURL = "http://127.0.0.1:7070"

// userAgent identifies the SDK in requests.
const userAgent = "airlock-go"

// Client calls the Airlock API. It is safe for concurrent use. Its zero value is not usable; call New.
type Client struct {
	baseURL string
	apiKey  string
	hc      *http.Client
	ua      string
	maxRead int64 // the most held in memory of one response; see WithMaxReadBytes
}

// Option configures a Client.
type Option func(*Client)

// WithAPIKey sets the API key sent as "Authorization: Bearer <key>" on every request.
func WithAPIKey(key string) Option {
	return func(c *Client) { c.apiKey = key }
}

// WithHTTPClient sets the HTTP client used for every request and WebSocket; nil keeps
// http.DefaultClient. A Timeout on it also cuts off long downloads and uploads (and bounds WebSocket
// handshakes), so prefer leaving it zero and passing contexts with deadlines.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.ua = ua }
}

// New returns a client of the API at baseURL (for example "http://127.0.0.1:7070"; "" is DefaultBaseURL).
// The URL may have a path prefix when the API sits behind a proxy. It is not checked here: a malformed
// URL makes every call fail.
func New(baseURL string, opts ...Option) *Client {
	if baseURL == "" {
		baseURL = DefaultBaseURL
	}
	c := &Client{baseURL: strings.TrimRight(baseURL, "/"), hc: http.DefaultClient, ua: userAgent, maxRead: DefaultMaxReadBytes}
	for _, o := range opts {
		o(c)
	}
	return c
}

// BaseURL reports the URL the client sends requests to.
func (c *Client) BaseURL() string { return c.baseURL }

// LogValue logs the client without its API key.
func (c *Client) LogValue() slog.Value {
	key := ""
	if c.apiKey != "" {
		key = "REDACTED"
	}
	return slog.GroupValue(slog.String("base_url", c.baseURL), slog.String("api_key", key))
}

// Health reports nil when the server answers GET /v1/health.
func (c *Client) Health(ctx context.Context) error {
	return c.callNoAnswer(ctx, http.MethodGet, "/v1/health", nil, nil, "health")
}

// url returns the absolute URL of an API path with query q.
func (c *Client) url(path string, q url.Values) string {
	u := c.baseURL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// header returns the headers every request carries.
func (c *Client) header() http.Header {
	h := http.Header{}
	if c.apiKey != "" {
		h.Set("Authorization", "Bearer "+c.apiKey)
	}
	if c.ua != "" {
		h.Set("User-Agent", c.ua)
	}
	return h
}

// request describes one HTTP call.
type request struct {
	method      string
	path        string // below the base URL, query excluded
	query       url.Values
	body        io.Reader
	contentType string
	header      http.Header // added to the client's headers
}

// do sends r and returns the response when its status is 2xx; otherwise it closes the body and returns
// the *APIError the body describes. The caller closes the body of a returned response.
func (c *Client) do(ctx context.Context, r request) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, r.method, c.url(r.path, r.query), r.body)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	for k, vs := range c.header() {
		req.Header[k] = vs
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, errorFromResponse(resp)
	}
	return resp, nil
}

// doJSON sends in (when not nil) as a JSON body and decodes a JSON response into out (when not nil).
// hdr, when not nil, adds headers to the request.
func (c *Client) doJSON(ctx context.Context, method, path string, q url.Values, in, out any, hdr http.Header) error {
	_, err := c.doJSONHeader(ctx, method, path, q, in, out, hdr)
	return err
}

// callJSON sends a JSON request (in, when not nil) and decodes the answer into a new T. A failure is
// wrapped with what failed, format and args as fmt.Sprintf takes them ("get secret %s", name).
func callJSON[T any](ctx context.Context, c *Client, method, path string, q url.Values, in any, format string, args ...any) (*T, error) {
	var out T
	if err := c.doJSON(ctx, method, path, q, in, &out, nil); err != nil {
		return nil, fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
	}
	return &out, nil
}

// callNoAnswer is callJSON for calls whose answer has nothing to decode.
func (c *Client) callNoAnswer(ctx context.Context, method, path string, q url.Values, in any, format string, args ...any) error {
	if err := c.doJSON(ctx, method, path, q, in, nil, nil); err != nil {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
	}
	return nil
}

// doJSONHeader is doJSON that also reports the response headers.
func (c *Client) doJSONHeader(ctx context.Context, method, path string, q url.Values, in, out any, hdr http.Header) (http.Header, error) {
	r := request{method: method, path: path, query: q, header: hdr}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		r.body = bytes.NewReader(b)
		r.contentType = "application/json"
	}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return resp.Header, nil
	}
	if err := c.decodeJSON(resp.Body, out); err != nil {
		return resp.Header, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp.Header, nil
}

// sandboxPath returns /v1/sandboxes/{id} followed by the escaped elements of rest.
func sandboxPath(id string, rest ...string) string {
	return objectPath("/v1/sandboxes/", id, rest...)
}

// workPath is the path of exec, process and file work on id: a sandbox, or a session ("se_…"), whose
// work goes to its current sandbox (resuming it first if it is paused and resumes automatically).
func workPath(id string, rest ...string) string {
	if strings.HasPrefix(id, "se_") {
		return objectPath("/v1/sessions/", id, rest...)
	}
	return sandboxPath(id, rest...)
}

func objectPath(prefix, id string, rest ...string) string {
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString(url.PathEscape(id))
	for _, r := range rest {
		b.WriteString("/")
		b.WriteString(r)
	}
	return b.String()
}

// decodeJSON decodes one JSON value of a response body into v, reading at most the client's bound
// (WithMaxReadBytes) of it: past that, an error matching ErrTooLarge.
func (c *Client) decodeJSON(r io.Reader, v any) error {
	lr := &limitReader{r: r, max: c.maxRead}
	if err := json.NewDecoder(lr).Decode(v); err != nil {
		if lr.read > lr.max {
			return fmt.Errorf("the response is %w", lr.tooLarge())
		}
		return fmt.Errorf("decode response: %w", err)
	}
	return nil
}
