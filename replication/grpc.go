package replication

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"likes/internal/rpcjson"
)

// The gRPC service, described by hand (no code generation): messages are the
// Go structs below, encoded by rpcjson.Codec (JSON, per connection, never registered globally).
const (
	serviceName   = "likes.replication.v1.Replication"
	methodPush    = "/" + serviceName + "/Push"
	methodDigest  = "/" + serviceName + "/Digest"
	methodHeads   = "/" + serviceName + "/Heads"
	maxMsgDefault = 64 << 20
)

// Wire messages: each carries the protocol version V next to the payload
// (embedded, so the JSON is flat: {"V":1,"From":…}).
type (
	pushRequest struct {
		V int
		Batch
	}
	pushResponse struct {
		V      int
		Cursor Cursor
	}
	digestRequest struct {
		V int
		DigestRequest
	}
	digestResponse struct {
		V int
		DigestResponse
	}
	headsRequest struct {
		V int
		HeadsRequest
	}
	headsResponse struct {
		V int
		HeadsResponse
	}
)

// replicationHandler is what serviceDesc dispatches to (*Server implements it).
type replicationHandler interface {
	handlePush(context.Context, *pushRequest) (*pushResponse, error)
	handleDigest(context.Context, *digestRequest) (*digestResponse, error)
	handleHeads(context.Context, *headsRequest) (*headsResponse, error)
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*replicationHandler)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Push", Handler: pushHandler},
		{MethodName: "Digest", Handler: digestHandler},
		{MethodName: "Heads", Handler: headsHandler},
	},
	Streams:  []grpc.StreamDesc{},
	Metadata: "likes/replication/v1",
}

func pushHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(pushRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	h := srv.(replicationHandler)
	if interceptor == nil {
		return h.handlePush(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: methodPush}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return h.handlePush(ctx, req.(*pushRequest))
	})
}

func digestHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(digestRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	h := srv.(replicationHandler)
	if interceptor == nil {
		return h.handleDigest(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: methodDigest}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return h.handleDigest(ctx, req.(*digestRequest))
	})
}

func headsHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(headsRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	h := srv.(replicationHandler)
	if interceptor == nil {
		return h.handleHeads(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: methodHeads}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return h.handleHeads(ctx, req.(*headsRequest))
	})
}

func checkVersion(v int) error {
	if v != ProtocolVersion {
		return status.Errorf(codes.FailedPrecondition,
			"replication: protocol version mismatch: peer speaks v%d, this region speaks v%d", v, ProtocolVersion)
	}
	return nil
}

func (s *Server) handlePush(ctx context.Context, in *pushRequest) (*pushResponse, error) {
	if err := checkVersion(in.V); err != nil {
		return nil, err
	}
	cur, err := s.Push(ctx, in.Batch)
	if err != nil {
		return nil, err
	}
	return &pushResponse{V: ProtocolVersion, Cursor: cur}, nil
}

func (s *Server) handleDigest(ctx context.Context, in *digestRequest) (*digestResponse, error) {
	if err := checkVersion(in.V); err != nil {
		return nil, err
	}
	resp, err := s.Digest(ctx, in.DigestRequest)
	if err != nil {
		return nil, err
	}
	return &digestResponse{V: ProtocolVersion, DigestResponse: resp}, nil
}

func (s *Server) handleHeads(ctx context.Context, in *headsRequest) (*headsResponse, error) {
	if err := checkVersion(in.V); err != nil {
		return nil, err
	}
	resp, err := s.Heads(ctx, in.HeadsRequest)
	if err != nil {
		return nil, err
	}
	return &headsResponse{V: ProtocolVersion, HeadsResponse: resp}, nil
}

// ServerOptions are the options the *grpc.Server hosting a Server must be
// built with: the JSON codec (forced for this server only; it still encodes
// protobuf messages as protobuf, so generated services can share the server),
// a 64 MiB receive limit, and a keepalive policy that admits the transport's
// pings.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(rpcjson.Codec{}),
		grpc.MaxRecvMsgSize(maxMsgDefault),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
}

// TransportConfig configures GRPCTransport. Zero fields take the defaults.
type TransportConfig struct {
	// KeepaliveTime is how long a connection may be idle before a ping
	// (default 20s; at least 5s, the server's enforcement minimum).
	KeepaliveTime time.Duration
	// KeepaliveTimeout is how long a ping may go unanswered before the
	// connection is closed (default 5s).
	KeepaliveTimeout time.Duration
	// MaxMsgSize bounds sent and received messages (default 64 MiB).
	MaxMsgSize int
	// Credentials returns the transport credentials for calling region (mutual
	// TLS that accepts only a server proving that region: peertls). Nil:
	// plaintext, for an operator's explicit --insecure-plaintext-peers and
	// for tests.
	Credentials func(region string) credentials.TransportCredentials
}

func (c TransportConfig) withDefaults() (TransportConfig, error) {
	if c.KeepaliveTime == 0 {
		c.KeepaliveTime = 20 * time.Second
	}
	if c.KeepaliveTimeout == 0 {
		c.KeepaliveTimeout = 5 * time.Second
	}
	if c.MaxMsgSize == 0 {
		c.MaxMsgSize = maxMsgDefault
	}
	switch {
	case c.KeepaliveTime < 5*time.Second:
		return c, fmt.Errorf("replication: TransportConfig.KeepaliveTime %v below the server's 5s minimum", c.KeepaliveTime)
	case c.KeepaliveTimeout < 0:
		return c, fmt.Errorf("replication: TransportConfig.KeepaliveTimeout %v < 0", c.KeepaliveTimeout)
	case c.MaxMsgSize < 0:
		return c, fmt.Errorf("replication: TransportConfig.MaxMsgSize %d < 0", c.MaxMsgSize)
	}
	return c, nil
}

// GRPCTransport is the Transport over gRPC: one cached *grpc.ClientConn per
// peer (region and address), mutual TLS naming the region it meant to reach
// (TransportConfig.Credentials; plaintext only when that is nil), keepalive,
// and the JSON codec forced per connection. Safe for concurrent use.
type GRPCTransport struct {
	cfg TransportConfig

	mu     sync.Mutex
	closed bool
	conns  map[string]*grpc.ClientConn
	bytes  map[string]*byteCounts // by address; survives Forget
}

type byteCounts struct{ sent, received atomic.Uint64 }

var _ Transport = (*GRPCTransport)(nil)

// ErrTransportClosed is returned by a closed GRPCTransport.
var ErrTransportClosed = errors.New("replication: transport closed")

// NewGRPCTransport validates cfg and returns a transport with no connections;
// they are made on first use.
func NewGRPCTransport(cfg TransportConfig) (*GRPCTransport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &GRPCTransport{cfg: cfg, conns: make(map[string]*grpc.ClientConn), bytes: make(map[string]*byteCounts)}, nil
}

func (t *GRPCTransport) conn(p Peer) (*grpc.ClientConn, error) {
	addr := p.GRPCAddr
	if addr == "" {
		return nil, status.Error(codes.InvalidArgument, "replication: peer has no gRPC address")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrTransportClosed
	}
	// Keyed by region too: an address that gossip re-assigns to another
	// region gets a connection that verifies the new name.
	key := p.Region + "|" + addr
	if cc, ok := t.conns[key]; ok {
		return cc, nil
	}
	creds := insecure.NewCredentials()
	if t.cfg.Credentials != nil {
		creds = t.cfg.Credentials(p.Region)
	}
	bc, ok := t.bytes[addr]
	if !ok {
		bc = new(byteCounts)
		t.bytes[addr] = bc
	}
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(creds),
		rpcjson.Reconnect(),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: t.cfg.KeepaliveTime, Timeout: t.cfg.KeepaliveTimeout, PermitWithoutStream: true,
		}),
		grpc.WithDefaultCallOptions(
			grpc.ForceCodecV2(rpcjson.Codec{Sent: &bc.sent, Received: &bc.received}),
			grpc.MaxCallSendMsgSize(t.cfg.MaxMsgSize),
			grpc.MaxCallRecvMsgSize(t.cfg.MaxMsgSize),
		),
	)
	if err != nil {
		return nil, fmt.Errorf("replication: connect %s: %w", addr, err)
	}
	t.conns[key] = cc
	return cc, nil
}

// Push sends b to peer and returns the peer's cursor for this region.
func (t *GRPCTransport) Push(ctx context.Context, peer Peer, b Batch) (Cursor, error) {
	cc, err := t.conn(peer)
	if err != nil {
		return Cursor{}, err
	}
	var out pushResponse
	if err := cc.Invoke(ctx, methodPush, &pushRequest{V: ProtocolVersion, Batch: b}, &out); err != nil {
		return Cursor{}, err
	}
	if err := checkVersion(out.V); err != nil {
		return Cursor{}, err
	}
	return out.Cursor, nil
}

// Digest sends an anti-entropy digest to peer.
func (t *GRPCTransport) Digest(ctx context.Context, peer Peer, req DigestRequest) (DigestResponse, error) {
	cc, err := t.conn(peer)
	if err != nil {
		return DigestResponse{}, err
	}
	var out digestResponse
	if err := cc.Invoke(ctx, methodDigest, &digestRequest{V: ProtocolVersion, DigestRequest: req}, &out); err != nil {
		return DigestResponse{}, err
	}
	if err := checkVersion(out.V); err != nil {
		return DigestResponse{}, err
	}
	return out.DigestResponse, nil
}

// Heads asks peer for its own-log heads on behalf of a planned move's new
// owner (see Fencer).
func (t *GRPCTransport) Heads(ctx context.Context, peer Peer, req HeadsRequest) (HeadsResponse, error) {
	cc, err := t.conn(peer)
	if err != nil {
		return HeadsResponse{}, err
	}
	var out headsResponse
	if err := cc.Invoke(ctx, methodHeads, &headsRequest{V: ProtocolVersion, HeadsRequest: req}, &out); err != nil {
		return HeadsResponse{}, err
	}
	if err := checkVersion(out.V); err != nil {
		return HeadsResponse{}, err
	}
	return out.HeadsResponse, nil
}

// BytesSent is the number of encoded bytes sent to addr so far (retries included).
func (t *GRPCTransport) BytesSent(addr string) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if bc, ok := t.bytes[addr]; ok {
		return bc.sent.Load()
	}
	return 0
}

// Forget closes the cached connections to addr, if any (a peer moved or left).
func (t *GRPCTransport) Forget(addr string) {
	t.mu.Lock()
	var gone []*grpc.ClientConn
	for k, cc := range t.conns {
		if strings.HasSuffix(k, "|"+addr) {
			gone = append(gone, cc)
			delete(t.conns, k)
		}
	}
	t.mu.Unlock()
	for _, cc := range gone {
		_ = cc.Close()
	}
}

// Close closes every connection. It is idempotent; later calls fail with
// ErrTransportClosed.
func (t *GRPCTransport) Close() error {
	t.mu.Lock()
	conns := t.conns
	t.conns = map[string]*grpc.ClientConn{}
	t.closed = true
	t.mu.Unlock()
	var errs []error
	for _, cc := range conns {
		if err := cc.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
