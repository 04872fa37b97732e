package etcdembed

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap/zapcore"

	"github.com/likes-dev/likes/internal/logging"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestLogsBridged: with EmbeddedConfig.Logger the server's zap logs land in
// the process's slog handler (JSON here), levels mapped, and its listener
// shutdown at Close is not reported as an error.
func TestLogsBridged(t *testing.T) {
	var buf lockedBuf
	lg := logging.New(&buf, logging.Options{Format: logging.FormatJSON, Level: slog.LevelInfo})
	e, err := StartEmbedded(EmbeddedConfig{Dir: t.TempDir(), ClientAddr: freeAddr(t), PeerAddr: freeAddr(t),
		Logger: logging.ZapDemoting(lg, "etcd", zapcore.InfoLevel, logging.ClosedConn)})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	out := buf.String()
	if !strings.Contains(out, `"component":"etcd"`) || !strings.Contains(out, `"level":"INFO"`) {
		t.Fatalf("no bridged etcd lines:\n%.2000s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, `"level":"ERROR"`) && strings.Contains(l, "use of closed network connection") {
			t.Errorf("shutdown logged as an error: %s", l)
		}
	}
}
