package epoch

import (
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// EmbeddedConfig configures an in-process, single-member etcd server.
type EmbeddedConfig struct {
	// Name of the member (default "likes").
	Name string
	// Dir is the data directory (required; created if absent).
	Dir string
	// ClientAddr and PeerAddr are host:port to listen on, normally loopback,
	// e.g. "127.0.0.1:2379" and "127.0.0.1:2380" (both required).
	ClientAddr, PeerAddr string
	// StartTimeout bounds the wait for the server to be ready (default 30s).
	StartTimeout time.Duration
	// LogLevel of the server's zap logger (default "fatal": etcd logs its own
	// listener shutdown as errors; real failures still arrive on Err()).
	LogLevel string
	// UnsafeNoFsync skips fsync (tests only: a crash can lose acknowledged
	// writes).
	UnsafeNoFsync bool
}

// Embedded is a running embedded etcd server.
type Embedded struct {
	etcd      *embed.Etcd
	endpoints []string
	closeOnce sync.Once
}

// StartEmbedded starts the server and waits until it serves clients.
func StartEmbedded(c EmbeddedConfig) (*Embedded, error) {
	if c.Dir == "" || c.ClientAddr == "" || c.PeerAddr == "" {
		return nil, errors.New("epoch: EmbeddedConfig needs Dir, ClientAddr and PeerAddr")
	}
	if c.Name == "" {
		c.Name = "likes"
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.LogLevel == "" {
		c.LogLevel = "fatal"
	}
	curl, err := url.Parse("http://" + c.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("epoch: ClientAddr: %w", err)
	}
	purl, err := url.Parse("http://" + c.PeerAddr)
	if err != nil {
		return nil, fmt.Errorf("epoch: PeerAddr: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = c.Name
	cfg.Dir = c.Dir
	cfg.LogLevel = c.LogLevel
	cfg.ListenClientUrls = []url.URL{*curl}
	cfg.AdvertiseClientUrls = []url.URL{*curl}
	cfg.ListenPeerUrls = []url.URL{*purl}
	cfg.AdvertisePeerUrls = []url.URL{*purl}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = c.UnsafeNoFsync
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("epoch: start embedded etcd: %w", err)
	}
	timer := time.NewTimer(c.StartTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("epoch: embedded etcd failed while starting: %w", err)
	case <-timer.C:
		e.Close()
		return nil, fmt.Errorf("epoch: embedded etcd not ready after %v", c.StartTimeout)
	}
	return &Embedded{etcd: e, endpoints: []string{curl.String()}}, nil
}

// Endpoints are the client URLs to give NewClient.
func (e *Embedded) Endpoints() []string { return append([]string(nil), e.endpoints...) }

// Err reports a fatal server error after start; it is closed by Close.
func (e *Embedded) Err() <-chan error { return e.etcd.Err() }

// Close stops the server. It is idempotent. Close clients first: open watch
// streams hold the server's graceful stop for its request timeout.
func (e *Embedded) Close() {
	e.closeOnce.Do(e.etcd.Close)
}

// NewClient dials endpoints with a quiet (error-level) logger.
func NewClient(endpoints []string) (*clientv3.Client, error) {
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	lg, err := zc.Build()
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      lg,
	})
}
