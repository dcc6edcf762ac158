package httpserver

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/stretchr/testify/require"
)

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	promauto.With(reg).NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_test_total", Help: "test"}).Add(3)
	var readyErr atomic.Pointer[error]
	s, err := Start("127.0.0.1:0", reg, func(context.Context) (string, error) {
		if e := readyErr.Load(); e != nil {
			return "", *e
		}
		return "nats: connected\n", nil
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Shutdown(context.Background())) })
	base := "http://" + s.Addr().String()

	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		name, path string
		notReady   bool
		code       int
		body       string
	}{
		{"metrics from the process registry", "/metrics", false, 200, "kvcm_gc_test_total 3"},
		{"healthz", "/healthz", false, 200, "ok"},
		{"ready", "/readyz", false, 200, "ready\nnats: connected"},
		{"not ready", "/readyz", true, 503, "not ready: redis down"},
		{"healthz while not ready", "/healthz", true, 200, "ok"},
		{"unknown path", "/nope", false, 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			readyErr.Store(nil)
			if tt.notReady {
				e := errors.New("redis down")
				readyErr.Store(&e)
			}
			code, body := get(tt.path)
			require.Equal(t, tt.code, code)
			require.True(t, strings.Contains(body, tt.body), body)
		})
	}
	// Nothing of the global registry leaks in.
	_, body := get("/metrics")
	require.NotContains(t, body, "go_goroutines")
}
