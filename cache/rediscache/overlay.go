package rediscache

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

var _ edge.Overlay = (*Overlay)(nil)

// Overlay is the Redis session overlay: a hash {e: epoch, o: op, s: state}
// per (user, item), PX OverlayTTL. Put is a compare-and-set in one script, so
// a newer version is never replaced by an older one, whatever order racing
// Puts arrive in.
type Overlay struct{ s *Store }

// Overlay returns the session overlay of s.
func (s *Store) Overlay() *Overlay { return &Overlay{s: s} }

// key length-prefixes user so no (user, item) pair can forge another's key.
func (o *Overlay) key(user, item string) string {
	return o.s.cfg.Prefix + "o:" + strconv.Itoa(len(user)) + ":" + user + item
}

// overlayPut compares versions as decimal strings (length, then bytes), so
// uint64 epochs and ops above 2^53 compare exactly (Lua numbers are doubles).
// KEYS[1] = key; ARGV = epoch, op, state, ttl ms. Returns 1 if written.
var overlayPut = redis.NewScript(`
local function older(e1, o1, e2, o2)
  if #e1 ~= #e2 then return #e1 < #e2 end
  if e1 ~= e2 then return e1 < e2 end
  if #o1 ~= #o2 then return #o1 < #o2 end
  return o1 < o2
end
local cur = redis.call('HMGET', KEYS[1], 'e', 'o')
if cur[1] and cur[2] and older(ARGV[1], ARGV[2], cur[1], cur[2]) then
  return 0
end
redis.call('HSET', KEYS[1], 'e', ARGV[1], 'o', ARGV[2], 's', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
`)

// Put implements edge.Overlay.
func (o *Overlay) Put(ctx context.Context, user, item string, e edge.OverlayEntry) error {
	return o.s.do(ctx, func(ctx context.Context) error {
		return overlayPut.Run(ctx, o.s.rdb, []string{o.key(user, item)},
			strconv.FormatUint(e.Version.Epoch, 10), strconv.FormatUint(e.Version.Op, 10),
			strconv.FormatUint(uint64(e.State), 10), ms(o.s.cfg.OverlayTTL)).Err()
	})
}

// Get implements edge.Overlay.
func (o *Overlay) Get(ctx context.Context, user, item string) (edge.OverlayEntry, bool, error) {
	var vals []any
	err := o.s.do(ctx, func(ctx context.Context) error {
		var err error
		vals, err = o.s.rdb.HMGet(ctx, o.key(user, item), "e", "o", "s").Result()
		return err
	})
	if err != nil {
		return edge.OverlayEntry{}, false, err
	}
	var f [3]uint64
	for i, v := range vals {
		str, ok := v.(string)
		if !ok { // missing key or field (an expired or partial hash): a miss
			return edge.OverlayEntry{}, false, nil
		}
		bits := 64
		if i == 2 {
			bits = 8
		}
		n, perr := strconv.ParseUint(str, 10, bits)
		if perr != nil {
			return edge.OverlayEntry{}, false, fmt.Errorf("rediscache: overlay entry of (%q, %q): %w", user, item, perr)
		}
		f[i] = n
	}
	if len(vals) != 3 {
		return edge.OverlayEntry{}, false, errors.New("rediscache: HMGET answered the wrong number of fields")
	}
	return edge.OverlayEntry{
		State:   crdt.State(f[2]),
		Version: crdt.Version{Epoch: f[0], Op: f[1]},
	}, true, nil
}
