// Package httpserver is the HTTP endpoint of every kvcm-gc process: /metrics from the
// process's own Prometheus registry (never the global one), /healthz (the process is up) and
// /readyz (its stages can work). It is its own small package so each binary serves the same
// three paths with the same semantics.
package httpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ReadyFunc reports readiness: a human-readable report, and an error when not ready.
type ReadyFunc func(ctx context.Context) (string, error)

// ReadyTimeout bounds one /readyz: its checks ping servers, and a probe must not pile up. A
// readiness probe's timeout must be above it (the chart's is; deploy/ tests it).
const ReadyTimeout = 2 * time.Second

// Server serves the endpoints until Shutdown.
type Server struct {
	srv  *http.Server
	addr net.Addr
	done chan error
}

// Handler returns the mux of the three endpoints.
func Handler(reg *prometheus.Registry, ready ReadyFunc) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
		defer cancel()
		report, err := ready(ctx)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "not ready: %v\n%s", err, report)
			return
		}
		_, _ = fmt.Fprintf(w, "ready\n%s", report)
	})
	return mux
}

// Start listens on addr ("host:port"; port 0 picks a free one, see Addr) and serves in the
// background.
func Start(addr string, reg *prometheus.Registry, ready ReadyFunc, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen http %s: %w", addr, err)
	}
	s := &Server{
		srv: &http.Server{
			Handler:           Handler(reg, ready),
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		addr: ln.Addr(),
		done: make(chan error, 1),
	}
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	log.Info("http server listening", "addr", s.addr.String())
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.addr }

// Shutdown stops accepting requests and waits for those in progress, up to ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if serveErr := <-s.done; err == nil {
		err = serveErr
	}
	if err != nil {
		return fmt.Errorf("shut down http server: %w", err)
	}
	return nil
}
