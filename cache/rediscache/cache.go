package rediscache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/likes-dev/likes/counts"
)

var _ counts.Cache = (*Cache)(nil)

// Cache is the Redis count cache: one string per item, PX CacheTTL; the
// refresh slot is a separate key taken with SET NX PX and released with DEL.
type Cache struct{ s *Store }

// Cache returns the count cache of s.
func (s *Store) Cache() *Cache { return &Cache{s: s} }

func (c *Cache) key(item string) string  { return c.s.cfg.Prefix + "c:" + item }
func (c *Cache) slot(item string) string { return c.s.cfg.Prefix + "r:" + item }

// Get implements counts.Cache. A miss is (zero, false, nil); an error (Redis
// down, a malformed value) is for the caller to treat as a miss.
func (c *Cache) Get(ctx context.Context, item string) (counts.Entry, bool, error) {
	var raw []byte
	err := c.s.do(ctx, func(ctx context.Context) error {
		var err error
		raw, err = c.s.rdb.Get(ctx, c.key(item)).Bytes()
		return err
	})
	if errors.Is(err, redis.Nil) {
		return counts.Entry{}, false, nil
	}
	if err != nil {
		return counts.Entry{}, false, err
	}
	e, err := decodeEntry(raw)
	if err != nil {
		return counts.Entry{}, false, fmt.Errorf("rediscache: cache entry of %q: %w", item, err)
	}
	return e, true, nil
}

// Set implements counts.Cache.
func (c *Cache) Set(ctx context.Context, item string, e counts.Entry) error {
	return c.s.do(ctx, func(ctx context.Context) error {
		return c.s.rdb.Set(ctx, c.key(item), encodeEntry(e), time.Duration(ms(c.s.cfg.CacheTTL))*time.Millisecond).Err()
	})
}

// TryRefresh implements counts.Cache: SET slot NX PX ttl.
func (c *Cache) TryRefresh(ctx context.Context, item string, ttl time.Duration) (bool, error) {
	var got bool
	err := c.s.do(ctx, func(ctx context.Context) error {
		var err error
		got, err = c.s.rdb.SetNX(ctx, c.slot(item), "1", time.Duration(ms(ttl))*time.Millisecond).Result()
		return err
	})
	return got, err
}

// DoneRefresh implements counts.Cache: DEL slot.
func (c *Cache) DoneRefresh(ctx context.Context, item string) error {
	return c.s.do(ctx, func(ctx context.Context) error { return c.s.rdb.Del(ctx, c.slot(item)).Err() })
}

// entryFormat is the first byte of an encoded entry; a change of layout takes
// a new value, and an old process reads the new layout as an error (a miss).
const entryFormat = 1

// encodeEntry is the compact encoding: the format byte, then Count, AsOf and
// StoredAt as zigzag varints (typically 15 bytes).
func encodeEntry(e counts.Entry) []byte {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen64)
	b = append(b, entryFormat)
	b = binary.AppendVarint(b, e.Count)
	b = binary.AppendVarint(b, e.AsOf)
	b = binary.AppendVarint(b, e.StoredAt)
	return b
}

func decodeEntry(b []byte) (counts.Entry, error) {
	if len(b) == 0 || b[0] != entryFormat {
		return counts.Entry{}, errors.New("unknown format")
	}
	b = b[1:]
	var v [3]int64
	for i := range v {
		x, n := binary.Varint(b)
		if n <= 0 {
			return counts.Entry{}, errors.New("truncated")
		}
		v[i] = x
		b = b[n:]
	}
	if len(b) != 0 {
		return counts.Entry{}, errors.New("trailing bytes")
	}
	return counts.Entry{Count: v[0], AsOf: v[1], StoredAt: v[2]}, nil
}
