package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge/edgetest"
	"github.com/likes-dev/likes/epoch/epochtest"
	"github.com/likes-dev/likes/store/pebblestore"
)

// TestBackupAndRestore: likectl backup checkpoints each region's stopped
// folder with its identity and a manifest; likectl restore installs one into
// an empty folder, folds its log and leaves it rebuilding from its peers;
// restores into a non-empty folder and hostile manifests are refused.
func TestBackupAndRestore(t *testing.T) {
	ctx := context.Background()
	data, out, data2 := t.TempDir(), filepath.Join(t.TempDir(), "bk"), t.TempDir()
	for _, name := range []string{"us", "eu"} {
		st, err := pebblestore.Open(pebblestore.Options{Dir: filepath.Join(data, name), Region: name, Partitions: 4})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			if _, err := st.Apply(ctx, edgetest.Like(fmt.Sprintf("item-%d", i%3), fmt.Sprintf("user-%d", i), fmt.Sprintf("k%d", i), 1, 1)); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	id := `{"format":1,"cluster":"","region":"us","dataSet":"0123456789abcdef0123456789abcdef","createdMs":1}`
	if err := os.WriteFile(filepath.Join(data, "us", identityName), []byte(id), 0o644); err != nil {
		t.Fatal(err)
	}
	likectl := func(args ...string) (string, error) {
		var o, e bytes.Buffer
		err := run(ctx, args, &o, &e)
		return o.String() + e.String(), err
	}
	if msg, err := likectl("backup", "--data", data, "--regions", "us,eu", "--out", out, "--partitions", "4", "--etcd-snapshot=false"); err != nil {
		t.Fatalf("backup: %v\n%s", err, msg)
	}
	if _, err := likectl("backup", "--data", data, "--regions", "us", "--out", out, "--etcd-snapshot=false"); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("backup over an existing folder: %v", err)
	}
	if msg, err := likectl("restore", "--from", out, "--data", data2, "--region", "us"); err != nil {
		t.Fatalf("restore: %v\n%s", err, msg)
	}
	if b, err := os.ReadFile(filepath.Join(data2, "us", identityName)); err != nil || string(b) != id {
		t.Fatalf("identity not restored: %q %v", b, err)
	}
	st, err := pebblestore.Open(pebblestore.Options{Dir: filepath.Join(data2, "us"), Region: "us", Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	e, ok, err := st.Edge(ctx, "item-1", "user-7")
	if err != nil || !ok || e.State != crdt.Liked {
		t.Fatalf("restored edge: %+v ok=%v err=%v", e, ok, err)
	}
	if n, _ := st.Count(ctx, "item-1"); n != 7 {
		t.Fatalf("restored count %d, want 7 (the log folded)", n)
	}
	if r := st.Rebuilding(); len(r) != 1 || r[0] != "eu" {
		t.Fatalf("rebuilding from %v, want [eu]", r)
	}
	_ = st.Close()
	if _, err := likectl("restore", "--from", out, "--data", data2, "--region", "us"); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("restore into a non-empty folder: %v", err)
	}
	if _, err := likectl("restore", "--from", out, "--data", t.TempDir(), "--region", "ap"); err == nil || !strings.Contains(err.Error(), "no region") {
		t.Fatalf("restore of a region not in the backup: %v", err)
	}
	for name, m := range map[string]string{
		"not json":      "x",
		"unknown field": `{"format":1,"partitions":4,"regions":[{"name":"us"}],"evil":1}`,
		"path escape":   `{"format":1,"partitions":4,"regions":[{"name":"../us"}]}`,
		"bad format":    `{"format":9,"partitions":4,"regions":[{"name":"us"}]}`,
		"etcd name":     `{"format":1,"partitions":4,"regions":[{"name":"us"}],"etcd":"/etc/passwd"}`,
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, manifestFile), []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := likectl("restore", "--from", dir, "--data", t.TempDir(), "--region", "us"); err == nil {
			t.Errorf("%s: a hostile manifest was accepted", name)
		}
	}
}

// TestBackupSavesEtcd: the backup carries an etcd snapshot named in its
// manifest.
func TestBackupSavesEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	e := epochtest.StartEmbedded(t)
	data, out := t.TempDir(), filepath.Join(t.TempDir(), "bk")
	st, err := pebblestore.Open(pebblestore.Options{Dir: filepath.Join(data, "us"), Region: "us", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	var o bytes.Buffer
	err = run(context.Background(), []string{"backup", "--data", data, "--regions", "us", "--out", out, "--partitions", "2",
		"--etcd", strings.Join(e.Endpoints(), ",")}, &o, &o)
	if err != nil {
		t.Fatalf("backup: %v\n%s", err, o.String())
	}
	m, err := readManifest(filepath.Join(out, manifestFile))
	if err != nil || m.Etcd != etcdSnapName {
		t.Fatalf("manifest %+v: %v", m, err)
	}
	if fi, err := os.Stat(filepath.Join(out, etcdSnapName)); err != nil || fi.Size() == 0 {
		t.Fatalf("etcd snapshot: %v %v", fi, err)
	}
}

// TestBackupRestoreProgress: backup and restore say on stderr how far they
// are (regions checkpointed, files copied, partitions folded), stdout keeps
// the summary, and --quiet silences stderr only.
func TestBackupRestoreProgress(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	for _, name := range []string{"us", "eu"} {
		st, err := pebblestore.Open(pebblestore.Options{Dir: filepath.Join(data, name), Region: name, Partitions: 2})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Apply(ctx, edgetest.Like("item-1", "user-1", "k1", 1, 1)); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	likectl := func(args ...string) (string, string) {
		t.Helper()
		var o, e bytes.Buffer
		if err := run(ctx, args, &o, &e); err != nil {
			t.Fatalf("likectl %v: %v\n%s%s", args, err, o.String(), e.String())
		}
		return o.String(), e.String()
	}
	out := filepath.Join(t.TempDir(), "bk")
	stdout, stderr := likectl("backup", "--data", data, "--regions", "us,eu", "--out", out, "--partitions", "2", "--etcd-snapshot=false")
	for _, want := range []string{"backup: 0/2 regions checkpointed; us next", "backup: 2/2 regions checkpointed (eu: "} {
		if !strings.Contains(stderr, want) {
			t.Errorf("backup stderr lacks %q:\n%s", want, stderr)
		}
	}
	if !strings.Contains(stdout, "backup of 2 regions") || strings.Contains(stdout, "checkpointed") {
		t.Errorf("backup stdout is the summary only:\n%s", stdout)
	}
	stdout, stderr = likectl("restore", "--from", out, "--data", t.TempDir(), "--region", "us")
	for _, want := range []string{"restore: copy: ", " files (", "restore: fold log partitions: 2/2 (1 events folded)"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("restore stderr lacks %q:\n%s", want, stderr)
		}
	}
	if !strings.Contains(stdout, "restored region us") {
		t.Errorf("restore stdout: %s", stdout)
	}
	out2 := filepath.Join(t.TempDir(), "bk")
	if _, stderr := likectl("backup", "--quiet", "--data", data, "--regions", "us", "--out", out2, "--partitions", "2", "--etcd-snapshot=false"); stderr != "" {
		t.Errorf("backup --quiet wrote to stderr: %q", stderr)
	}
	if _, stderr := likectl("restore", "--quiet", "--from", out2, "--data", t.TempDir(), "--region", "us"); stderr != "" {
		t.Errorf("restore --quiet wrote to stderr: %q", stderr)
	}
}
