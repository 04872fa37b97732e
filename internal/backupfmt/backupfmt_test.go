package backupfmt

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func checkpoint(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{"000001.sst": strings.Repeat("s", 3000), "MANIFEST-000002": "m", "OPTIONS-000003": "o"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var reg = Region{Format: 1, Name: "us", Partitions: 2, Heads: []uint64{3, 0}, CreatedMs: 7}

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	calls := 0
	if err := Write(&buf, reg, []byte(`{"id":1}`), checkpoint(t), func() { calls++ }); err != nil {
		t.Fatal(err)
	}
	if calls != 3 {
		t.Fatalf("beforeFile called %d times, want 3", calls)
	}
	dst := filepath.Join(t.TempDir(), "us")
	var files int
	var bytesIn int64
	got, err := Extract(&buf, dst, func(f int, b int64) { files, bytesIn = f, b })
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "us" || got.Partitions != 2 || got.Heads[0] != 3 || files != 3 || bytesIn != 3002 {
		t.Fatalf("region %+v, progress %d files %d bytes", got, files, bytesIn)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "db", "000001.sst")); err != nil || len(b) != 3000 {
		t.Fatalf("sst: %d bytes, %v", len(b), err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, IdentityName)); err != nil || string(b) != `{"id":1}` {
		t.Fatalf("identity %q %v", b, err)
	}
}

type entry struct {
	name string
	body string
	typ  byte
}

func stream(ents ...entry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Typeflag: typ, Name: e.name, Mode: 0o644}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if typ == tar.TypeSymlink {
			h.Linkname = "/etc/passwd"
		}
		_ = tw.WriteHeader(h)
		_, _ = tw.Write([]byte(e.body))
	}
	_ = tw.Close()
	return buf.Bytes()
}

const regJSON = `{"format":1,"name":"us","partitions":1,"heads":[1],"createdMs":1}`

// TestHostileStreams: what an attacker (or a cut connection) could send is
// refused with ErrStream, and nothing is written outside the folder.
func TestHostileStreams(t *testing.T) {
	ok := entry{name: "db/000001.sst", body: "x"}
	end := entry{name: EndName, body: `{"files":1,"bytes":1}`}
	r := entry{name: RegionName, body: regJSON}
	cases := map[string][]byte{
		"empty":              nil,
		"garbage":            []byte("not a tar at all, not at all, not a tar"),
		"no region first":    stream(ok, r, end),
		"region unknown key": stream(entry{name: RegionName, body: `{"format":1,"name":"us","partitions":1,"heads":[1],"evil":1}`}, ok, end),
		"region bad name":    stream(entry{name: RegionName, body: `{"format":1,"name":"..","partitions":1,"heads":[1]}`}, ok, end),
		"region slash":       stream(entry{name: RegionName, body: `{"format":1,"name":"a/b","partitions":1,"heads":[1]}`}, ok, end),
		"region heads":       stream(entry{name: RegionName, body: `{"format":1,"name":"us","partitions":2,"heads":[1]}`}, ok, end),
		"region format":      stream(entry{name: RegionName, body: `{"format":2,"name":"us","partitions":1,"heads":[1]}`}, ok, end),
		"region huge":        stream(entry{name: RegionName, body: strings.Repeat(" ", MaxJSON+1) + regJSON}, ok, end),
		"region trailing":    stream(entry{name: RegionName, body: regJSON + `{}`}, ok, end),
		"traversal":          stream(r, entry{name: "db/../../evil", body: "x"}, end),
		"nested":             stream(r, entry{name: "db/sub/x", body: "x"}, end),
		"dotdot":             stream(r, entry{name: "db/..", body: "x"}, end),
		"absolute":           stream(r, entry{name: "/etc/passwd", body: "x"}, end),
		"symlink":            stream(r, entry{name: "db/000001.sst", typ: tar.TypeSymlink}, end),
		"folder":             stream(r, entry{name: "db/x/", typ: tar.TypeDir}, end),
		"duplicate":          stream(r, ok, ok, entry{name: EndName, body: `{"files":2,"bytes":2}`}),
		"cut short":          stream(r, ok),
		"counts wrong":       stream(r, ok, entry{name: EndName, body: `{"files":2,"bytes":1}`}),
		"no files":           stream(r, entry{name: EndName, body: `{"files":0,"bytes":0}`}),
		"after end":          stream(r, ok, end, entry{name: "db/late", body: "x"}),
		"identity late":      stream(r, ok, entry{name: IdentityName, body: "{}"}, end),
		"identity huge":      stream(r, entry{name: IdentityName, body: strings.Repeat("x", MaxIdentity+1)}, ok, end),
		"unknown entry":      stream(r, entry{name: "README", body: "x"}, ok, end),
	}
	cut := stream(r, entry{name: "db/000001.sst", body: strings.Repeat("x", 4096)}, end)
	cases["truncated body"] = cut[:512+512+1000]
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			_, err := Extract(bytes.NewReader(b), filepath.Join(root, "us"), nil)
			if !errors.Is(err, ErrStream) {
				t.Fatalf("accepted or wrong error: %v", err)
			}
			if _, err := os.Stat(filepath.Join(root, "evil")); err == nil {
				t.Fatal("wrote outside the folder")
			}
		})
	}
}

func FuzzExtract(f *testing.F) {
	f.Add(stream(entry{name: RegionName, body: regJSON}, entry{name: "db/a", body: "x"}, entry{name: EndName, body: `{"files":1,"bytes":1}`}))
	f.Add([]byte("x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		root := t.TempDir()
		reg, err := Extract(bytes.NewReader(b), filepath.Join(root, "r"), nil)
		if err != nil {
			return
		}
		if reg.validate() != nil {
			t.Fatalf("accepted an invalid region %+v", reg)
		}
		ents, _ := os.ReadDir(root)
		if len(ents) != 1 || ents[0].Name() != "r" {
			t.Fatalf("wrote outside its folder: %v", ents)
		}
	})
}
