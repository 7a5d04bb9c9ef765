package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Client reads a node's REST API (GET /v1/...) into the types the API
// encodes. The zero value is not usable; create it with NewClient.
type Client struct {
	base string
	http *http.Client
}

// maxAPIBody bounds a response of the API (history of maxHistory records
// fits with room to spare).
const maxAPIBody = 16 << 20

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithHTTPClient sends the client's requests through hc instead of a plain
// http.Client with a 5 s timeout (e.g. one that dials inside a network
// namespace).
func WithHTTPClient(hc *http.Client) ClientOption {
	return func(c *Client) { c.http = hc }
}

// NewClient returns a client of the API at addr (DefaultStatusAddr, any
// host:port, or a URL).
func NewClient(addr string, opts ...ClientOption) *Client {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	c := &Client{base: strings.TrimSuffix(addr, "/"), http: &http.Client{Timeout: 5 * time.Second}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Status returns GET /v1/status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	return s, c.get(ctx, "/v1/status", &s)
}

// Peers returns GET /v1/peers.
func (c *Client) Peers(ctx context.Context) ([]PeerStatus, error) {
	var p []PeerStatus
	return p, c.get(ctx, "/v1/peers", &p)
}

// History returns GET /v1/history.
func (c *Client) History(ctx context.Context) ([]OuterRecord, error) {
	var h []OuterRecord
	return h, c.get(ctx, "/v1/history", &h)
}

func (c *Client) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("node API %s: is a node running there? %w", strings.TrimPrefix(c.base, "http://"), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIBody+1))
	if err != nil {
		return fmt.Errorf("node API GET %s: %w", path, err)
	}
	if len(body) > maxAPIBody {
		return fmt.Errorf("node API GET %s: response over %d bytes", path, maxAPIBody)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("node API GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("node API GET %s: %w", path, err)
	}
	return nil
}
