package region

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/likes-dev/likes/api"
	"github.com/likes-dev/likes/api/apitest"
	"github.com/likes-dev/likes/auth"
)

// TestOnlineBackupRefusals: a second backup while one runs answers 409
// backup_in_progress, a region whose store is not Pebble 501
// backup_unsupported, and a checkpoint folder left by a crashed backup is
// removed by the next one.
func TestOnlineBackupRefusals(t *testing.T) {
	secret := []byte(strings.Repeat("r", 32))
	dir := t.TempDir()
	r, err := Open(context.Background(), Config{Name: "us", DataDir: dir, Partitions: 2, Secret: secret, UserRate: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	srv := httptest.NewServer(r.API)
	defer srv.Close()
	get := func() (int, string) {
		tok, _ := auth.Sign(secret, "op", true, time.Minute, time.Now())
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/admin/backup", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := apitest.Client(t, srv.Client()).Do(req) // answers checked against api/openapi.yaml
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	stale := filepath.Join(dir, ".us.backup-123")
	if err := os.MkdirAll(filepath.Join(stale, "db"), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, body := get(); code != http.StatusOK || !strings.Contains(body, "END.json") {
		t.Fatalf("backup: %d %.200q", code, body)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("a crashed backup's folder is still there: %v", err)
	}
	r.backup.mu.Lock()
	code, body := get()
	r.backup.mu.Unlock()
	if code != http.StatusConflict || !strings.Contains(body, `"backup_in_progress"`) {
		t.Fatalf("a second backup: %d %s", code, body)
	}
	a := &admin{r: &Region{cfg: Config{Name: "eu", Engines: Engines{Store: StoreCassandra}}}}
	if _, err := a.Backup(context.Background()); !errors.Is(err, api.ErrBackupUnsupported) {
		t.Fatalf("a Cassandra region's backup: %v", err)
	}
}
