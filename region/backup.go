package region

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/likes-dev/likes/api"
	"github.com/likes-dev/likes/internal/backupfmt"
	"github.com/likes-dev/likes/store/pebblestore"
)

// backupGate admits one online backup of a region at a time: the
// checkpoint folder is the region's, and two of them would double the
// disk a backup costs for nothing.
type backupGate struct{ mu sync.Mutex }

// checkpoint is one online backup: a Pebble checkpoint in a hidden folder
// next to the region's data folder (same file system, so its SSTables are
// hard links and cost no space until compaction replaces them), removed
// by Close.
type checkpoint struct {
	dir      string
	region   backupfmt.Region
	identity []byte
	release  func()
	once     sync.Once
}

// Backup implements api.Admin.
func (a *admin) Backup(ctx context.Context) (api.BackupStream, error) {
	st, ok := a.r.Backend.(*pebblestore.Store)
	if !ok {
		return nil, fmt.Errorf("%w: %s (back up its engines with their own tools: Cassandra snapshots, Kafka retention)", api.ErrBackupUnsupported, a.r.cfg.Engines)
	}
	if !a.r.backup.mu.TryLock() {
		return nil, api.ErrBackupBusy
	}
	release := a.r.backup.mu.Unlock
	parent, name := a.r.cfg.DataDir, a.r.cfg.Name
	// A crash mid-backup leaves its folder; only one backup runs (the gate), so
	// every such folder is a leftover.
	if old, err := filepath.Glob(filepath.Join(parent, "."+name+".backup-*")); err == nil {
		for _, d := range old {
			_ = os.RemoveAll(d)
		}
	}
	cp, err := a.takeCheckpoint(ctx, st, parent, name)
	if err != nil {
		release()
		return nil, err
	}
	cp.release = release
	return cp, nil
}

func (a *admin) takeCheckpoint(ctx context.Context, st *pebblestore.Store, parent, name string) (*checkpoint, error) {
	reg := backupfmt.Region{Format: 1, Name: name, Partitions: st.Partitions(), CreatedMs: a.r.cfg.Clock.Now().UnixMilli()}
	// Heads first: the checkpoint, taken after, holds at least these.
	for p := 0; p < st.Partitions(); p++ {
		_, h, err := st.Read(ctx, uint32(p), ^uint64(0)-1, 1)
		if err != nil {
			return nil, fmt.Errorf("region: backup: log head of partition %d: %w", p, err)
		}
		reg.Heads = append(reg.Heads, h.Pos)
	}
	dir, err := os.MkdirTemp(parent, "."+name+".backup-")
	if err != nil {
		return nil, fmt.Errorf("region: backup: %w", err)
	}
	cp := &checkpoint{dir: dir, region: reg}
	if err := st.Checkpoint(filepath.Join(dir, "db")); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("region: backup: %w", err)
	}
	id, err := os.ReadFile(filepath.Join(parent, name, identityFile))
	switch {
	case err == nil:
		cp.identity = id
	case !os.IsNotExist(err): // a folder from before identities has none
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("region: backup: %w", err)
	}
	return cp, nil
}

// WriteTo implements api.BackupStream.
func (c *checkpoint) WriteTo(w io.Writer, beforeFile func()) error {
	return backupfmt.Write(w, c.region, c.identity, filepath.Join(c.dir, "db"), beforeFile)
}

// Close implements api.BackupStream; idempotent.
func (c *checkpoint) Close() error {
	var err error
	c.once.Do(func() {
		err = os.RemoveAll(c.dir)
		c.release()
	})
	return err
}
