package backupfmt

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Entry names of the stream.
const (
	RegionName   = "REGION.json"
	IdentityName = "LIKES-IDENTITY"
	DBPrefix     = "db/"
	EndName      = "END.json"
)

// Limits on what Extract accepts.
const (
	MaxJSON       = 1 << 20 // REGION.json and END.json
	MaxIdentity   = 4 << 10
	MaxPartitions = 4096
	maxNameLen    = 255
)

// ErrStream prefixes every refusal of a stream by Extract.
var ErrStream = errors.New("backupfmt: bad backup stream")

// Region is REGION.json.
type Region struct {
	Format     int    `json:"format"` // 1
	Name       string `json:"name"`
	Partitions int    `json:"partitions"`
	// Heads are the log heads by partition, read just before the
	// checkpoint: the checkpoint holds at least these positions.
	Heads     []uint64 `json:"heads"`
	CreatedMs int64    `json:"createdMs"`
}

// End is END.json.
type End struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

// validName: a region name (what epoch.ValidRegion accepts: not empty, at
// most 128 bytes, no slash or white space) that is also a safe folder name
// (no dots, no backslashes, no control characters), as likectl's --regions.
func validName(s string) bool {
	if s == "" || len(s) > 128 || strings.ContainsAny(s, "/ \t\n\\.") {
		return false
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

func (r Region) validate() error {
	if r.Format != 1 {
		return fmt.Errorf("%w: %s format %d (this likectl reads 1)", ErrStream, RegionName, r.Format)
	}
	if !validName(r.Name) {
		return fmt.Errorf("%w: %s: region %q is not a valid name", ErrStream, RegionName, r.Name)
	}
	if r.Partitions < 1 || r.Partitions > MaxPartitions || len(r.Heads) != r.Partitions {
		return fmt.Errorf("%w: %s: %d partitions with %d heads", ErrStream, RegionName, r.Partitions, len(r.Heads))
	}
	return nil
}

// Write streams r, the identity (nil: none) and the regular files of the
// checkpoint folder dbDir as a tar to w. beforeFile, if not nil, is called
// before each file (a server extends its write deadline there).
func Write(w io.Writer, r Region, identity []byte, dbDir string, beforeFile func()) error {
	if err := r.validate(); err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	now := time.Now()
	put := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(b)), Mode: 0o644, ModTime: now}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	rb, _ := json.Marshal(r) // cannot fail: plain struct
	if err := put(RegionName, rb); err != nil {
		return err
	}
	if identity != nil {
		if err := put(IdentityName, identity); err != nil {
			return err
		}
	}
	ents, err := os.ReadDir(dbDir)
	if err != nil {
		return err
	}
	var end End
	for _, e := range ents {
		if !e.Type().IsRegular() {
			return fmt.Errorf("backupfmt: %s: unexpected entry %s in a checkpoint", dbDir, e.Name())
		}
		if beforeFile != nil {
			beforeFile()
		}
		n, err := writeFile(tw, filepath.Join(dbDir, e.Name()), DBPrefix+e.Name(), now)
		if err != nil {
			return err
		}
		end.Files++
		end.Bytes += n
	}
	eb, _ := json.Marshal(end)
	if err := put(EndName, eb); err != nil {
		return err
	}
	return tw.Close()
}

func writeFile(tw *tar.Writer, path, name string, now time.Time) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: fi.Size(), Mode: 0o644, ModTime: now}); err != nil {
		return 0, err
	}
	// A checkpoint's files are immutable (hard links of SSTables, a copied
	// WAL and manifest), so Size is what Copy writes.
	return io.CopyN(tw, f, fi.Size())
}

// Extract reads a stream into dst (created; it must not exist or be empty):
// dst/db/<files> and dst/LIKES-IDENTITY. progress, if not nil, hears each db
// file as it lands (files so far, bytes so far). A refused stream leaves what
// it wrote in dst; the caller removes dst.
func Extract(r io.Reader, dst string, progress func(files int, bytes int64)) (Region, error) {
	var reg Region
	tr := tar.NewReader(r)
	next := func() (*tar.Header, error) {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("%w: it ends before %s (cut short?)", ErrStream, EndName)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrStream, err)
		}
		if h.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("%w: entry %q is not a regular file", ErrStream, h.Name)
		}
		if h.Size < 0 {
			return nil, fmt.Errorf("%w: entry %q has size %d", ErrStream, h.Name, h.Size)
		}
		return h, nil
	}
	h, err := next()
	if err != nil {
		return reg, err
	}
	if h.Name != RegionName {
		return reg, fmt.Errorf("%w: first entry %q, want %s", ErrStream, h.Name, RegionName)
	}
	if err := readJSON(tr, h, &reg); err != nil {
		return reg, err
	}
	if err := reg.validate(); err != nil {
		return reg, err
	}
	if err := os.MkdirAll(filepath.Join(dst, "db"), 0o755); err != nil {
		return reg, err
	}
	if ents, err := os.ReadDir(filepath.Join(dst, "db")); err != nil || len(ents) > 0 {
		return reg, fmt.Errorf("backupfmt: %s/db is not an empty folder", dst)
	}
	seen := map[string]bool{}
	var got End
	for {
		h, err := next()
		if err != nil {
			return reg, err
		}
		switch {
		case h.Name == EndName:
			var end End
			if err := readJSON(tr, h, &end); err != nil {
				return reg, err
			}
			if end != got {
				return reg, fmt.Errorf("%w: %s says %d files, %d bytes; the stream held %d, %d", ErrStream, EndName, end.Files, end.Bytes, got.Files, got.Bytes)
			}
			if got.Files == 0 {
				return reg, fmt.Errorf("%w: no checkpoint files", ErrStream)
			}
			if _, err := tr.Next(); err != io.EOF {
				return reg, fmt.Errorf("%w: entries after %s", ErrStream, EndName)
			}
			return reg, syncDir(filepath.Join(dst, "db"))
		case h.Name == IdentityName:
			if seen[h.Name] || got.Files > 0 {
				return reg, fmt.Errorf("%w: %s out of place", ErrStream, IdentityName)
			}
			seen[h.Name] = true
			if h.Size > MaxIdentity {
				return reg, fmt.Errorf("%w: %s of %d bytes", ErrStream, IdentityName, h.Size)
			}
			if _, err := extractFile(tr, h, filepath.Join(dst, IdentityName)); err != nil {
				return reg, err
			}
		case strings.HasPrefix(h.Name, DBPrefix):
			base := strings.TrimPrefix(h.Name, DBPrefix)
			if base == "" || base == "." || base == ".." || len(base) > maxNameLen || strings.ContainsAny(base, "/\\\x00") {
				return reg, fmt.Errorf("%w: entry name %q", ErrStream, h.Name)
			}
			if seen[h.Name] {
				return reg, fmt.Errorf("%w: entry %q twice", ErrStream, h.Name)
			}
			seen[h.Name] = true
			n, err := extractFile(tr, h, filepath.Join(dst, "db", base))
			if err != nil {
				return reg, err
			}
			got.Files++
			got.Bytes += n
			if progress != nil {
				progress(got.Files, got.Bytes)
			}
		default:
			return reg, fmt.Errorf("%w: unexpected entry %q", ErrStream, h.Name)
		}
	}
}

func readJSON(tr *tar.Reader, h *tar.Header, v any) error {
	if h.Size > MaxJSON {
		return fmt.Errorf("%w: %s of %d bytes", ErrStream, h.Name, h.Size)
	}
	b, err := io.ReadAll(io.LimitReader(tr, MaxJSON+1))
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrStream, h.Name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrStream, h.Name, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: %s: trailing data", ErrStream, h.Name)
	}
	return nil
}

func extractFile(tr *tar.Reader, h *tar.Header, path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, tr)
	if err != nil {
		err = fmt.Errorf("%w: %s: %w", ErrStream, h.Name, err)
	} else if n != h.Size {
		err = fmt.Errorf("%w: %s: %d of %d bytes", ErrStream, h.Name, n, h.Size)
	}
	return n, errors.Join(err, f.Sync(), f.Close())
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
