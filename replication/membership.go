package replication

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// MembershipConfig configures gossip peer discovery. Zero fields take the
// defaults, which suit loopback and a LAN (memberlist.DefaultLocalConfig).
type MembershipConfig struct {
	// ProtoMin and ProtoMax are the protocol versions this node announces
	// (defaults: the package's MinProtocol, MaxProtocol).
	ProtoMin, ProtoMax int
	// Region is this node's region. Required.
	Region string
	// GRPCAddr is where this node's replication Server listens (host:port). Required.
	GRPCAddr string
	// HTTPAddr is this node's public HTTP address, advertised for tools.
	HTTPAddr string
	// NodeName must be unique in the cluster (default: Region).
	NodeName string
	// BindAddr is the gossip address (default "127.0.0.1").
	BindAddr string
	// BindPort is the gossip port, TCP and UDP (default 0: a free port,
	// readable from Addr afterwards).
	BindPort int
	// AdvertiseAddr and AdvertisePort are the gossip address other nodes are
	// told to reach this one at (defaults: memberlist's choice from BindAddr,
	// and BindPort), e.g. a routable address when BindAddr is 0.0.0.0.
	AdvertiseAddr string
	AdvertisePort int
	// SecretKey, if set (16, 24 or 32 bytes), encrypts gossip.
	SecretKey []byte
	// OldKeys are also accepted from other nodes (a key rotation); they need
	// SecretKey, which stays the one this node sends with.
	OldKeys [][]byte
	// LeaveTimeout bounds the leave broadcast on Close (default 1s).
	LeaveTimeout time.Duration
	// Logger receives memberlist's internal log (default: discarded).
	Logger *log.Logger
	// Tune, if set, may adjust the memberlist configuration last (timeouts,
	// intervals); it must not replace Delegate or Events.
	Tune func(*memberlist.Config)
}

// nodeMeta is the gossiped node metadata.
type nodeMeta struct {
	Region   string `json:"region"`
	GRPCAddr string `json:"grpcAddr"`
	HTTPAddr string `json:"httpAddr,omitempty"`
	ProtoMin int    `json:"protoMin,omitempty"`
	ProtoMax int    `json:"protoMax,omitempty"`
}

// Member is one live node of the gossip cluster.
type Member struct {
	Name string
	Addr string // gossip host:port
	Peer Peer
}

// Membership discovers peers through hashicorp/memberlist gossip. It is a
// PeerSource. Safe for concurrent use.
type Membership struct {
	cfg     MembershipConfig
	ml      *memberlist.Memberlist
	self    Peer
	changes chan struct{}

	// view is the members as the event callbacks last told them: memberlist
	// rewrites the Nodes that Members() points to in place (a node that
	// restarts at a new address), so their fields are read only inside the
	// callbacks, which run under memberlist's node lock, and copied here.
	mu   sync.Mutex
	view map[string]Member

	closeOnce sync.Once
	closeErr  error
}

var _ PeerSource = (*Membership)(nil)

// NewMembership starts gossiping on cfg.BindAddr:cfg.BindPort. Call Join to
// meet a cluster; until then the node knows only itself.
func NewMembership(cfg MembershipConfig) (*Membership, error) {
	switch {
	case cfg.Region == "":
		return nil, errors.New("replication: MembershipConfig.Region is required")
	case cfg.GRPCAddr == "":
		return nil, errors.New("replication: MembershipConfig.GRPCAddr is required")
	case cfg.BindPort < 0 || cfg.BindPort > 65535:
		return nil, fmt.Errorf("replication: MembershipConfig.BindPort %d out of range", cfg.BindPort)
	case cfg.AdvertisePort < 0 || cfg.AdvertisePort > 65535:
		return nil, fmt.Errorf("replication: MembershipConfig.AdvertisePort %d out of range", cfg.AdvertisePort)
	case cfg.LeaveTimeout < 0:
		return nil, fmt.Errorf("replication: MembershipConfig.LeaveTimeout %v < 0", cfg.LeaveTimeout)
	}
	if cfg.NodeName == "" {
		cfg.NodeName = cfg.Region
	}
	if cfg.BindAddr == "" {
		cfg.BindAddr = "127.0.0.1"
	}
	if cfg.LeaveTimeout == 0 {
		cfg.LeaveTimeout = time.Second
	}
	if cfg.ProtoMin == 0 {
		cfg.ProtoMin = MinProtocol
	}
	if cfg.ProtoMax == 0 {
		cfg.ProtoMax = MaxProtocol
	}
	self := Peer{Region: cfg.Region, GRPCAddr: cfg.GRPCAddr, HTTPAddr: cfg.HTTPAddr, ProtoMin: cfg.ProtoMin, ProtoMax: cfg.ProtoMax}
	meta, err := json.Marshal(nodeMeta(self))
	if err != nil {
		return nil, err
	}
	if len(meta) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("replication: node metadata is %d bytes, memberlist allows %d", len(meta), memberlist.MetaMaxSize)
	}
	m := &Membership{cfg: cfg, self: self, changes: make(chan struct{}, 1), view: map[string]Member{}}

	mc := memberlist.DefaultLocalConfig()
	mc.Name = cfg.NodeName
	mc.BindAddr = cfg.BindAddr
	mc.BindPort = cfg.BindPort
	mc.AdvertisePort = cfg.BindPort
	if cfg.AdvertisePort != 0 {
		mc.AdvertisePort = cfg.AdvertisePort
	}
	mc.AdvertiseAddr = cfg.AdvertiseAddr
	mc.SecretKey = cfg.SecretKey
	if len(cfg.OldKeys) > 0 {
		if len(cfg.SecretKey) == 0 {
			return nil, errors.New("replication: MembershipConfig.OldKeys need a SecretKey")
		}
		kr, err := memberlist.NewKeyring(cfg.OldKeys, cfg.OldKeys[0])
		if err != nil {
			return nil, fmt.Errorf("replication: gossip keys: %w", err)
		}
		mc.Keyring = kr // Create adds SecretKey and makes it the primary
	}
	if cfg.Logger != nil {
		mc.Logger = cfg.Logger
	} else {
		mc.LogOutput = io.Discard
	}
	if cfg.Tune != nil {
		cfg.Tune(mc)
	}
	mc.Delegate = metaDelegate(meta)
	mc.Events = eventNotifier{m}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("replication: start gossip on %s:%d: %w", cfg.BindAddr, cfg.BindPort, err)
	}
	m.ml = ml
	return m, nil
}

// Join contacts seeds (gossip host:port) and returns how many answered. It
// succeeds if any did.
func (m *Membership) Join(seeds []string) (int, error) {
	if len(seeds) == 0 {
		return 0, nil
	}
	return m.ml.Join(seeds)
}

// Addr is this node's gossip address (host:port), to give others as a seed.
func (m *Membership) Addr() string {
	n := m.ml.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// Self is this node's own endpoint.
func (m *Membership) Self() Peer { return m.self }

// Members lists every live node, this one included, sorted by name. Nodes
// whose metadata cannot be read are listed with an empty Peer.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	out := make([]Member, 0, len(m.view))
	for _, mem := range m.view {
		out = append(out, mem)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// record copies a node's fields (called inside memberlist's callbacks).
func (m *Membership) record(n *memberlist.Node, alive bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !alive {
		delete(m.view, n.Name)
		return
	}
	var meta nodeMeta
	_ = json.Unmarshal(n.Meta, &meta)
	m.view[n.Name] = Member{
		Name: n.Name,
		Addr: net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))),
		Peer: Peer(meta),
	}
}

// Peers returns one endpoint per other region (excluding this node's region),
// sorted by region; when a region has several live nodes, the one with the
// smallest node name is chosen, so every node picks the same.
func (m *Membership) Peers() []Peer {
	best := map[string]Member{}
	for _, mem := range m.Members() {
		p := mem.Peer
		if mem.Name == m.cfg.NodeName || p.Region == "" || p.Region == m.self.Region || p.GRPCAddr == "" {
			continue
		}
		if cur, ok := best[p.Region]; !ok || mem.Name < cur.Name {
			best[p.Region] = mem
		}
	}
	out := make([]Peer, 0, len(best))
	for _, mem := range best {
		out = append(out, mem.Peer)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Region < out[j].Region })
	return out
}

// Changes receives a value (coalesced, never blocking memberlist) whenever a
// node joins, leaves or updates its metadata.
func (m *Membership) Changes() <-chan struct{} { return m.changes }

// Close leaves the cluster (bounded by LeaveTimeout) and stops gossiping. It
// is idempotent.
func (m *Membership) Close() error {
	m.closeOnce.Do(func() {
		leaveErr := m.ml.Leave(m.cfg.LeaveTimeout)
		m.closeErr = errors.Join(leaveErr, m.ml.Shutdown())
	})
	return m.closeErr
}

// metaDelegate serves the node metadata; it carries no user messages or state.
type metaDelegate []byte

func (d metaDelegate) NodeMeta(limit int) []byte {
	if len(d) > limit {
		return nil // checked at construction; never truncate JSON
	}
	return d
}
func (metaDelegate) NotifyMsg([]byte)                           {}
func (metaDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (metaDelegate) LocalState(join bool) []byte                { return nil }
func (metaDelegate) MergeRemoteState(buf []byte, join bool)     {}

// eventNotifier copies membership events into the Membership's view and
// turns them into a coalesced signal.
type eventNotifier struct{ m *Membership }

func (e eventNotifier) notify() {
	select {
	case e.m.changes <- struct{}{}:
	default:
	}
}
func (e eventNotifier) NotifyJoin(n *memberlist.Node)   { e.m.record(n, true); e.notify() }
func (e eventNotifier) NotifyLeave(n *memberlist.Node)  { e.m.record(n, false); e.notify() }
func (e eventNotifier) NotifyUpdate(n *memberlist.Node) { e.m.record(n, true); e.notify() }
