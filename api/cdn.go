package api

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CDN-friendly reads (seed 000 section 3: page loads read a CDN cache with a
// few seconds of TTL; seed 003 sizes it at 80-95 % of reads). An anonymous
// count — GET …/count, or a batchGet without a token — is the same for
// everyone, so it is cacheable: Cache-Control public with max-age HotMaxAge
// for an item written often at this region (the viral ones, whose counts
// move), ColdMaxAge otherwise, stale-while-revalidate and stale-if-error (a
// CDN keeps serving a slightly old count while the origin is slow or down;
// the body's asOf says how old), a weak ETag of the count and its asOf with
// 304 Not Modified, and Surrogate-Key item:<id> for a purge by item. Anything
// personal (the button, a batchGet with a token) is private, no-store, Vary:
// Authorization. A cached body's stalenessMs is frozen at the time it was
// made: clients compute staleness from asOf.

// CDNConfig sets the cacheable reads' lifetimes. Zero fields take defaults.
type CDNConfig struct {
	// ColdMaxAge and HotMaxAge are max-age for ordinary and hot items
	// (defaults 30s and 5s); negative turns caching off (no-store).
	ColdMaxAge, HotMaxAge time.Duration
	// StaleWhileRevalidate and StaleIfError (defaults 30s and 5m).
	StaleWhileRevalidate, StaleIfError time.Duration
	// HotWrites is the writes per minute at this region that make an item
	// hot (default 60).
	HotWrites int
}

func (c CDNConfig) withDefaults() CDNConfig {
	if c.ColdMaxAge == 0 {
		c.ColdMaxAge = 30 * time.Second
	}
	if c.HotMaxAge == 0 {
		c.HotMaxAge = 5 * time.Second
	}
	if c.StaleWhileRevalidate == 0 {
		c.StaleWhileRevalidate = 30 * time.Second
	}
	if c.StaleIfError == 0 {
		c.StaleIfError = 5 * time.Minute
	}
	if c.HotWrites <= 0 {
		c.HotWrites = 60
	}
	return c
}

// hotItems counts writes per item in the current and the previous minute,
// bounded: past maxTracked items in a minute, new items are not tracked and
// are served with the cold max-age (their counts may then be cached longer
// than a hot item's, never served wrong), so no client can grow the map.
type hotItems struct {
	mu        sync.Mutex
	minute    int64
	cur, prev map[string]int
}

const maxTracked = 1 << 16

func (h *hotItems) roll(now time.Time) {
	m := now.Unix() / 60
	switch {
	case m == h.minute:
	case m == h.minute+1:
		h.prev, h.cur, h.minute = h.cur, map[string]int{}, m
	default:
		h.prev, h.cur, h.minute = map[string]int{}, map[string]int{}, m
	}
}

func (h *hotItems) wrote(item string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.roll(now)
	if _, ok := h.cur[item]; ok || len(h.cur) < maxTracked {
		h.cur[item]++
	}
}

// hot reports whether item had at least n writes in the last full minute or
// this one so far.
func (h *hotItems) hot(item string, n int, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.roll(now)
	return h.cur[item] >= n || h.prev[item] >= n
}

// publicCache sets the headers of an anonymous count of items and answers
// 304 when the client's ETag matches; it reports whether it answered.
func (s *Server) publicCache(w http.ResponseWriter, r *http.Request, etag string, items ...string) bool {
	c := s.cdn
	h := w.Header()
	if c.ColdMaxAge < 0 || c.HotMaxAge < 0 {
		h.Set("Cache-Control", "no-store")
		return false
	}
	now := s.cfg.Clock.Now()
	age := c.ColdMaxAge
	keys := make([]string, 0, len(items))
	for _, it := range items {
		if s.hot.hot(it, c.HotWrites, now) {
			age = c.HotMaxAge
		}
		keys = append(keys, "item:"+it)
	}
	h.Set("Cache-Control", fmt.Sprintf("public, max-age=%d, stale-while-revalidate=%d, stale-if-error=%d",
		int(age.Seconds()), int(c.StaleWhileRevalidate.Seconds()), int(c.StaleIfError.Seconds())))
	h.Set("Surrogate-Key", strings.Join(keys, " "))
	h.Set("ETag", etag)
	if match := r.Header.Get("If-None-Match"); match != "" && etagMatches(match, etag) {
		w.WriteHeader(http.StatusNotModified)
		return true
	}
	return false
}

// privateNoStore marks a personal answer.
func privateNoStore(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "private, no-store")
	w.Header().Add("Vary", "Authorization")
}

func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		if t = strings.TrimSpace(t); t == etag || t == "*" {
			return true
		}
	}
	return false
}

// countETag is a weak validator of the served counts: their values and asOf.
func countETag(parts ...countJSON) string {
	var b strings.Builder
	b.WriteString(`W/"`)
	for i, c := range parts {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(strconv.FormatInt(c.Count, 36))
		b.WriteByte('-')
		b.WriteString(hash36(c.AsOf))
	}
	b.WriteByte('"')
	return b.String()
}

func hash36(s string) string {
	var h uint32 = 2166136261
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return strconv.FormatUint(uint64(h), 36)
}
