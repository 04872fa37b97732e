package loadgen

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrNotLoopback is returned for a target that is not on this machine's loopback.
var ErrNotLoopback = errors.New("loadgen: only loopback targets are allowed (127.0.0.0/8, ::1, localhost)")

// CheckLoopback parses raw and accepts it only if it is an http(s) URL whose host
// is a loopback IP (127.0.0.0/8, ::1) or the name "localhost".
func CheckLoopback(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("loadgen: bad URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("loadgen: URL %q: scheme must be http or https", raw)
	}
	if !loopbackHost(u.Hostname()) {
		return nil, fmt.Errorf("%w: refusing %q", ErrNotLoopback, raw)
	}
	return u, nil
}

func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if i := strings.IndexByte(host, '%'); i >= 0 { // zone, e.g. ::1%lo
		host = host[:i]
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// NewClient returns an HTTP client tuned for keep-alive on loopback with room
// for conns (+ a few for the sampler) idle connections per host, that never uses a proxy, never follows redirects,
// and whose dialer refuses any address that is not loopback (so even a name
// that resolves elsewhere cannot be reached).
func NewClient(conns int, timeout time.Duration) *http.Client {
	d := &net.Dialer{
		Timeout:   5 * time.Second,
		KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil || !loopbackHost(host) {
				return fmt.Errorf("%w: dial %s", ErrNotLoopback, address)
			}
			return nil
		},
	}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         d.DialContext,
		MaxIdleConns:        conns + 4,
		MaxIdleConnsPerHost: conns + 4,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
