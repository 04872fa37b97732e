package pebblestore

import (
	"io"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// gen is one opened Pebble database. A reopen after a fatal write error
// replaces it; refs counts the calls, iterators and batches using it, so the
// old database is closed only once nothing uses it.
type gen struct {
	db   *pebble.DB
	refs sync.WaitGroup
}

// dbRef is the Store's handle on its current database. It offers the subset
// of *pebble.DB the store uses, each call holding a reference for its whole
// lifetime (an iterator's or a batch's until Close). While a reopen is under
// way there is no current database and calls fail at once with errReopening
// rather than wait: a nested call (a Get inside an open iterator) must never
// block on a reopen that waits for the outer call.
type dbRef struct {
	s   *Store
	mu  sync.Mutex
	cur *gen
}

func (r *dbRef) acquire() (*gen, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil {
		return nil, errReopening
	}
	r.cur.refs.Add(1)
	return r.cur, nil
}

// attach makes db current.
func (r *dbRef) attach(db *pebble.DB) {
	r.mu.Lock()
	r.cur = &gen{db: db}
	r.mu.Unlock()
}

// detach takes the current database away from new users and returns it.
func (r *dbRef) detach() *gen {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.cur
	r.cur = nil
	return g
}

// raw is the current database, for tests and tools (nil while reopening).
func (r *dbRef) raw() *pebble.DB {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil {
		return nil
	}
	return r.cur.db
}

type releaseCloser struct {
	c io.Closer
	g *gen
}

func (c releaseCloser) Close() error {
	err := c.c.Close()
	c.g.refs.Done()
	return err
}

// Get implements getter.
func (r *dbRef) Get(key []byte) ([]byte, io.Closer, error) {
	g, err := r.acquire()
	if err != nil {
		return nil, nil, err
	}
	v, c, err := g.db.Get(key)
	if err != nil {
		g.refs.Done()
		return nil, nil, err
	}
	return v, releaseCloser{c: c, g: g}, nil
}

// iterator is a Pebble iterator that releases its database on Close.
type iterator struct {
	*pebble.Iterator
	g *gen
}

func (it *iterator) Close() error {
	err := it.Iterator.Close()
	it.g.refs.Done()
	return err
}

// NewIter opens an iterator on the current database.
func (r *dbRef) NewIter(o *pebble.IterOptions) (*iterator, error) {
	g, err := r.acquire()
	if err != nil {
		return nil, err
	}
	it, err := g.db.NewIter(o)
	if err != nil {
		g.refs.Done()
		return nil, err
	}
	return &iterator{Iterator: it, g: g}, nil
}

// batch is a Pebble batch whose Commit goes through the store's write guard.
// Without a current database it is a detached batch: Set works, Commit fails.
type batch struct {
	*pebble.Batch
	s *Store
	g *gen
}

func (b *batch) Commit(o *pebble.WriteOptions) error {
	if b.g == nil {
		return errReopening
	}
	return b.s.guardWrite("batch commit", func() error { return b.Batch.Commit(o) })
}

func (b *batch) Close() error {
	err := b.Batch.Close()
	if b.g != nil {
		b.g.refs.Done()
		b.g = nil
	}
	return err
}

func (r *dbRef) newBatch(indexed bool) (*batch, error) {
	g, err := r.acquire()
	if err != nil {
		return &batch{Batch: new(pebble.Batch), s: r.s}, err
	}
	b := g.db.NewBatch()
	if indexed {
		b = g.db.NewIndexedBatch()
	}
	return &batch{Batch: b, s: r.s, g: g}, nil
}

// NewBatch returns a write-only batch (a detached one while reopening, whose
// Commit fails).
func (r *dbRef) NewBatch() *batch {
	b, _ := r.newBatch(false)
	return b
}

// LogData syncs (or appends to) the WAL through the write guard.
func (r *dbRef) LogData(data []byte, o *pebble.WriteOptions) error {
	g, err := r.acquire()
	if err != nil {
		return err
	}
	defer g.refs.Done()
	return r.s.guardWrite("WAL sync", func() error { return g.db.LogData(data, o) })
}
