package rdq

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// ClientConfig configures a Client. Only URL is required.
type ClientConfig struct {
	// URL is the server's base URL, e.g. http://127.0.0.1:7480.
	URL string
	// Token is sent as "Authorization: Bearer TOKEN" when not empty.
	Token string
	// HTTPClient overrides the HTTP client. The default keeps up to 256 idle
	// connections to the server, so a worker with many handlers reuses
	// connections instead of opening one per request (net/http's default
	// keeps only 2 per host).
	HTTPClient *http.Client
	// UserAgent is sent with every request; default "rdq-go".
	UserAgent string
	// TraceParent, when set, is called on every submit (once per Submit or
	// SubmitBatch) with the submit's context and answers the current W3C
	// traceparent, or "" for none: the way to plug in a tracer such as
	// OpenTelemetry (docs/sdk-go.md, "Tracing"). When it answers nothing
	// well formed, the traceparent ContextWithTraceParent put in the
	// context is used, as when TraceParent is nil.
	TraceParent func(ctx context.Context) string
	// TLSConfig is used for an https:// URL by both the HTTP client and the
	// gRPC connection: a private CA in RootCAs, a client certificate. When
	// nil, the TLSClientConfig of HTTPClient's *http.Transport is used if
	// there is one, otherwise the system's roots.
	TLSConfig *tls.Config
	// GRPCDialOptions are added to the options of the gRPC connection the
	// Worker's Work stream uses (interceptors, keep-alive parameters, …).
	GRPCDialOptions []grpc.DialOption
	// SubmitTransport is how Submit and SubmitBatch reach the server:
	// TransportGRPC calls Tasks/Submit on the client's gRPC connection (the
	// one a Worker's stream uses); TransportHTTP, and TransportAuto (the
	// default), POST /v1/tasks. There is no fallback from one to the other.
	SubmitTransport Transport
}

// Client talks to `rdq serve`: its methods over HTTP (Submit and
// SubmitBatch over gRPC with ClientConfig.SubmitTransport), a Worker's Work
// stream over gRPC on the same address (h2c for http://, TLS with ALPN h2
// for https://). It is safe for concurrent use; make one and share it.
// Every call honours its context's cancellation and deadline.
type Client struct {
	base  string
	token string
	ua    string
	http  *http.Client
	// traceParent is ClientConfig.TraceParent.
	traceParent func(ctx context.Context) string
	// submitGRPC: Submit and SubmitBatch call Tasks/Submit (ClientConfig.SubmitTransport).
	submitGRPC bool

	// The gRPC connection, made on first use (by workers, and by submits
	// over gRPC).
	grpcTarget string
	grpcTLS    *tls.Config // nil: plaintext HTTP/2 (h2c)
	grpcOpts   []grpc.DialOption
	grpcMu     sync.Mutex
	grpcConn   *grpc.ClientConn
}

// NewClient makes a Client.
func NewClient(cfg ClientConfig) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("rdq: the client URL must be http(s)://host[:port], got %q", cfg.URL)
	}
	if cfg.SubmitTransport > TransportHTTP {
		return nil, fmt.Errorf("rdq: ClientConfig.SubmitTransport %v is not a transport", cfg.SubmitTransport)
	}
	tlsConfig := cfg.TLSConfig
	hc := cfg.HTTPClient
	if hc == nil {
		t := defaultTransport()
		if tlsConfig != nil {
			t.TLSClientConfig = tlsConfig.Clone()
		}
		hc = &http.Client{Transport: t}
	} else if t, ok := hc.Transport.(*http.Transport); ok && tlsConfig == nil && t.TLSClientConfig != nil {
		tlsConfig = t.TLSClientConfig
	}
	ua := cfg.UserAgent
	if ua == "" {
		ua = "rdq-go"
	}
	c := &Client{base: strings.TrimRight(cfg.URL, "/"), token: cfg.Token, ua: ua, http: hc, traceParent: cfg.TraceParent,
		submitGRPC: cfg.SubmitTransport == TransportGRPC, grpcTarget: u.Host, grpcOpts: cfg.GRPCDialOptions}
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		c.grpcTarget = net.JoinHostPort(u.Hostname(), port)
	}
	if u.Scheme == "https" {
		c.grpcTLS = &tls.Config{}
		if tlsConfig != nil {
			c.grpcTLS = tlsConfig.Clone()
		}
	}
	return c, nil
}

func defaultTransport() *http.Transport {
	return &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
}

// CloseIdleConnections closes connections the client keeps for reuse.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// Close closes the gRPC connection, if one was made, and the idle HTTP
// connections. Work streams still open on the connection fail.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	c.grpcMu.Lock()
	defer c.grpcMu.Unlock()
	if c.grpcConn == nil {
		return nil
	}
	err := c.grpcConn.Close()
	c.grpcConn = nil
	return err
}

// do sends one request and decodes a JSON answer into out (when not nil).
// A non-2xx answer becomes an *Error carrying the server's code.
func (c *Client) do(ctx context.Context, method, path string, body any, out any) (int, error) {
	return c.doWithHeader(ctx, method, path, body, nil, out)
}

// doWithHeader is do with extra request headers.
func (c *Client) doWithHeader(ctx context.Context, method, path string, body any, header http.Header, out any) (int, error) {
	resp, err := c.send(ctx, method, path, body, header)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := readBody(resp)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("rdq: reading the answer to %s %s: %w", method, path, err)
	}
	if out != nil && len(data) > 0 {
		// Envelopes inside an answer decode through envelope.Envelope's
		// UnmarshalJSON, the canonical codec; the rest is encoding/json's.
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("rdq: decoding the answer to %s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// readBody reads a whole answer, into one buffer of the announced length
// when there is one (io.ReadAll grows its buffer step by step).
func readBody(resp *http.Response) ([]byte, error) {
	if n := resp.ContentLength; n > 0 && n <= 64<<20 {
		// net/http's body ends at the Content-Length, so this is all of it.
		buf := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	return io.ReadAll(resp.Body)
}

// send issues a request and returns a 2xx response with its body unread.
func (c *Client) send(ctx context.Context, method, path string, body any, header http.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		switch b := body.(type) {
		case []byte:
			rd = bytes.NewReader(b)
		default:
			data, err := json.Marshal(body)
			if err != nil {
				return nil, fmt.Errorf("rdq: encoding the %s %s request: %w", method, path, err)
			}
			rd = bytes.NewReader(data)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("rdq: %w", err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.ua)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("rdq: %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return nil, problem(resp.StatusCode, data)
}

// problem turns an error answer into an *Error; an answer that is not a
// problem document keeps its status and a code derived from it.
func problem(status int, data []byte) error {
	var p struct {
		Code   string `json:"code"`
		Title  string `json:"title"`
		Detail string `json:"detail"`
		Field  string `json:"field"`
		Holder string `json:"holder"`
		Hold   string `json:"hold"`
	}
	if json.Unmarshal(data, &p) != nil || p.Code == "" {
		p.Code = fmt.Sprintf("HTTP_%d", status)
		p.Detail = strings.TrimSpace(string(data))
	}
	return &Error{Status: status, Code: p.Code, Title: p.Title, Detail: p.Detail, Field: p.Field, Holder: p.Holder, Hold: p.Hold}
}

// IsCode reports whether err carries the stable code.
func IsCode(err error, code string) bool { return ErrorCode(err) == code }

var errEmptyID = errors.New("rdq: empty task id")

func escape(s string) string { return url.PathEscape(s) }
