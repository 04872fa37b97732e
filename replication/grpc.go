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

	"github.com/likes-dev/likes/internal/peerpb"
	"github.com/likes-dev/likes/internal/rpcjson"
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
		{MethodName: "Snapshot", Handler: snapshotHandler}, // snapshot.go
	},
	Streams:  []grpc.StreamDesc{},
	Metadata: "github.com/likes-dev/likes/replication/v1",
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

// checkV1 checks a version-1 message: it carries V = 1, and this region's
// range must include 1.
func (s *Server) checkV1(v int) error {
	if err := checkVersion(v); err != nil {
		return err
	}
	return s.checkProtocol(uint32(v))
}

func checkVersion(v int) error {
	if v != ProtocolVersion {
		return status.Errorf(codes.FailedPrecondition,
			"replication: protocol version mismatch: peer speaks v%d, this region speaks v%d", v, ProtocolVersion)
	}
	return nil
}

func (s *Server) handlePush(ctx context.Context, in *pushRequest) (*pushResponse, error) {
	if err := s.checkV1(in.V); err != nil {
		return nil, err
	}
	cur, err := s.Push(ctx, in.Batch)
	if err != nil {
		return nil, err
	}
	return &pushResponse{V: ProtocolVersion, Cursor: cur}, nil
}

func (s *Server) handleDigest(ctx context.Context, in *digestRequest) (*digestResponse, error) {
	if err := s.checkV1(in.V); err != nil {
		return nil, err
	}
	resp, err := s.Digest(ctx, in.DigestRequest)
	if err != nil {
		return nil, err
	}
	return &digestResponse{V: ProtocolVersion, DigestResponse: resp}, nil
}

func (s *Server) handleHeads(ctx context.Context, in *headsRequest) (*headsResponse, error) {
	if err := s.checkV1(in.V); err != nil {
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
// pings; extra options (tracing: internal/tracing.ServerOptions) follow.
func ServerOptions(extra ...grpc.ServerOption) []grpc.ServerOption {
	return append([]grpc.ServerOption{
		grpc.ForceServerCodecV2(rpcjson.Codec{}),
		grpc.MaxRecvMsgSize(maxMsgDefault),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}, extra...)
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
	// MinProtocol and MaxProtocol bound the protocol versions this region
	// speaks as a caller (defaults: the package's MinProtocol, MaxProtocol).
	MinProtocol, MaxProtocol int
	// Credentials returns the transport credentials for calling region (mutual
	// TLS that accepts only a server proving that region: peertls). Nil:
	// plaintext, for an operator's explicit --insecure-plaintext-peers and
	// for tests.
	Credentials func(region string) credentials.TransportCredentials
	// Interceptors run around every call to a peer (metrics).
	Interceptors []grpc.UnaryClientInterceptor
	// DialOptions are added to every connection: tracing and the request id
	// (internal/tracing.DialOptions), so a push continues at the peer in the
	// trace it was made in.
	DialOptions []grpc.DialOption
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
	if c.MinProtocol == 0 {
		c.MinProtocol = MinProtocol
	}
	if c.MaxProtocol == 0 {
		c.MaxProtocol = MaxProtocol
	}
	if c.MinProtocol < MinProtocol || c.MaxProtocol > MaxProtocol || c.MinProtocol > c.MaxProtocol {
		return c, fmt.Errorf("replication: TransportConfig protocols %d..%d outside %d..%d", c.MinProtocol, c.MaxProtocol, MinProtocol, MaxProtocol)
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
	// proto is the version learned for an address (a peer that announced
	// nothing answered Unimplemented to a higher one); reset by Forget.
	proto map[string]int
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
	return &GRPCTransport{cfg: cfg, conns: make(map[string]*grpc.ClientConn), bytes: make(map[string]*byteCounts),
		proto: make(map[string]int)}, nil
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
	cc, err := grpc.NewClient("passthrough:///"+addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithChainUnaryInterceptor(t.cfg.Interceptors...),
		rpcjson.Reconnect(),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: t.cfg.KeepaliveTime, Timeout: t.cfg.KeepaliveTimeout, PermitWithoutStream: true,
		}),
		grpc.WithDefaultCallOptions(
			grpc.ForceCodecV2(rpcjson.Codec{Sent: &bc.sent, Received: &bc.received}),
			grpc.MaxCallSendMsgSize(t.cfg.MaxMsgSize),
			grpc.MaxCallRecvMsgSize(t.cfg.MaxMsgSize),
		)}, t.cfg.DialOptions...)...,
	)
	if err != nil {
		return nil, fmt.Errorf("replication: connect %s: %w", addr, err)
	}
	t.conns[key] = cc
	return cc, nil
}

// ErrNoCommonProtocol is returned for a peer whose announced protocol range
// does not meet this region's.
var ErrNoCommonProtocol = errors.New("replication: no common protocol version")

// version is the protocol to talk to peer: the highest both sides support.
func (t *GRPCTransport) version(peer Peer) (int, error) {
	hi, lo := t.cfg.MaxProtocol, t.cfg.MinProtocol
	if peer.ProtoMax != 0 {
		hi = min(hi, peer.ProtoMax)
		lo = max(lo, peer.ProtoMin)
		if hi < lo {
			return 0, status.Errorf(codes.FailedPrecondition, "%v: region %s speaks %d..%d, this region %d..%d",
				ErrNoCommonProtocol, peer.Region, peer.ProtoMin, peer.ProtoMax, t.cfg.MinProtocol, t.cfg.MaxProtocol)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.proto[peer.GRPCAddr]; ok && v < hi {
		hi = v
	}
	return hi, nil
}

// stepDown records that peer does not serve version v (Unimplemented), so
// the next call uses v−1 if this region speaks it.
func (t *GRPCTransport) stepDown(peer Peer, v int, err error) bool {
	if status.Code(err) != codes.Unimplemented || v-1 < t.cfg.MinProtocol {
		return false
	}
	t.mu.Lock()
	t.proto[peer.GRPCAddr] = v - 1
	t.mu.Unlock()
	return true
}

// Push sends b to peer and returns the peer's cursor for this region.
func (t *GRPCTransport) Push(ctx context.Context, peer Peer, b Batch) (Cursor, error) {
	cc, err := t.conn(peer)
	if err != nil {
		return Cursor{}, err
	}
	v, err := t.version(peer)
	if err != nil {
		return Cursor{}, err
	}
	if v >= 2 {
		var out peerpb.PushResponse
		err := cc.Invoke(ctx, methodPushV2, &peerpb.PushRequest{Protocol: 2, Batch: batchToPB(b)}, &out)
		if err == nil {
			return cursorFromPB(out.GetCursor()), nil
		}
		if !t.stepDown(peer, v, err) {
			return Cursor{}, err
		}
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
	v, err := t.version(peer)
	if err != nil {
		return DigestResponse{}, err
	}
	if v >= 2 {
		var out peerpb.DigestResponse
		err := cc.Invoke(ctx, methodDigestV2, &peerpb.DigestRequest{Protocol: 2, From: req.From,
			Partitions: uint32(req.Partitions), Buckets: req.Buckets}, &out)
		if err == nil {
			return DigestResponse{Mismatched: out.GetMismatched(), Cursor: cursorFromPB(out.GetCursor())}, nil
		}
		if !t.stepDown(peer, v, err) {
			return DigestResponse{}, err
		}
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
	v, err := t.version(peer)
	if err != nil {
		return HeadsResponse{}, err
	}
	if v >= 2 {
		in := &peerpb.HeadsRequest{Protocol: 2, From: req.From, Partitions: uint32(req.Partitions)}
		for _, p := range req.Pins {
			in.Pins = append(in.Pins, &peerpb.PinRef{Range: p.Range, Epoch: p.Epoch})
		}
		var out peerpb.HeadsResponse
		err := cc.Invoke(ctx, methodHeadsV2, in, &out)
		if err == nil {
			return HeadsResponse{Log: out.GetLog()}, nil
		}
		if !t.stepDown(peer, v, err) {
			return HeadsResponse{}, err
		}
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
	delete(t.proto, addr)
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
