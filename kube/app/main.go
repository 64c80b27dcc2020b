// Command app is servo-actors' test application: a small HTTP service whose cost and behaviour
// are set by its environment, so that an optimizer's settings have a real effect on it.
//
//	GET  /work          WORK_MS milliseconds of CPU (?ms=N for this request), then 200
//	GET  /healthz       200 while the process serves
//	GET  /readyz        200, or 503 while READY is "false" or once UNREADY_AFTER has passed
//	GET  /metrics       Prometheus text format (latency histogram, requests by code, Go runtime)
//	POST /alloc?mb=N    N MiB more allocated, touched and held; answers the total held
//
// Environment (an invalid value exits 2 naming it, which in a pod is a real crash loop):
//
//	PORT              8080
//	LISTEN            the address to listen on; default all interfaces ("" ), e.g. 127.0.0.1
//	WORK_MS           5 (a non-negative number; fractions allowed)
//	READY             "false" fails /readyz; anything else or unset passes
//	UNREADY_AFTER     a Go duration: /readyz fails from that long after the start (ready, then not)
//	EXIT_AFTER        a Go duration: the process exits 1 that long after the start (a crash)
//	ALLOC_MB          0: MiB allocated, touched and held from the start
//	SHUTDOWN_TIMEOUT  10s: after SIGTERM, how long in-flight requests get before the exit
//	GOGC, GOMEMLIMIT  read by the Go runtime itself; logged at start
//
// It logs one line at start and one at stop (to stderr), never one per request.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/metrics"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// version names the build in the start line and the app_info metric; set with -ldflags -X.
var version = "dev"

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := loadConfig(os.Getenv)
	if err != nil {
		logger.Error("invalid configuration", "error", err.Error())
		os.Exit(2)
	}
	if err := run(cfg, logger); err != nil {
		logger.Error("stopped", "error", err.Error())
		os.Exit(1)
	}
}

func run(cfg config, logger *slog.Logger) error {
	ballast := &ballast{}
	if err := ballast.grow(cfg.allocMB); err != nil {
		return err
	}
	meters := newMeters(version, ballast)
	app := &handlers{cfg: cfg, ballast: ballast, started: time.Now()}
	server := &http.Server{
		Handler:           meters.instrument(app.routes()),
		ReadHeaderTimeout: readHeaderTimeout,
	}
	listener, err := net.Listen("tcp", net.JoinHostPort(cfg.listen, cfg.port))
	if err != nil {
		return fmt.Errorf("listen on %s: %w", net.JoinHostPort(cfg.listen, cfg.port), err)
	}
	logger.Info("started",
		"version", version,
		"address", listener.Addr().String(),
		"work_ms", cfg.workMS,
		"ready", cfg.ready,
		"unready_after", cfg.unreadyAfter.String(),
		"exit_after", cfg.exitAfter.String(),
		"alloc_mb", cfg.allocMB,
		"gogc", gcPercent(),
		"gomemlimit", memoryLimit(),
		"gomaxprocs", runtime.GOMAXPROCS(0),
		"pid", os.Getpid(),
	)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	served := make(chan error, 1)
	go func() { served <- server.Serve(listener) }()

	var crash <-chan time.Time
	if cfg.exitAfter > 0 {
		crash = time.After(cfg.exitAfter)
	}

	var received os.Signal
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-crash:
		return fmt.Errorf("exiting with status 1 as EXIT_AFTER=%s asks", cfg.exitAfter)
	case received = <-signals:
	}
	// Shutdown closes the listener at once (no new connections), then waits for in-flight
	// requests to finish, at most SHUTDOWN_TIMEOUT; idle keep-alive connections are closed.
	started := time.Now()
	deadline, release := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer release()
	err = server.Shutdown(deadline)
	if errors.Is(err, context.DeadlineExceeded) {
		_ = server.Close()
		logger.Warn("stopped", "signal", signalName(received), "graceful", false,
			"waited", time.Since(started).Round(time.Millisecond).String(),
			"shutdown_timeout", cfg.shutdownTimeout.String())
		return nil
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	logger.Info("stopped", "signal", signalName(received), "graceful", true,
		"waited", time.Since(started).Round(time.Millisecond).String())
	return nil
}

// readHeaderTimeout bounds a client that opens a connection and sends nothing.
const readHeaderTimeout = 10 * time.Second

// gcPercent is the GOGC the runtime applies (100 by default, -1 for off).
func gcPercent() int64 {
	sample := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(sample)
	return int64(sample[0].Value.Uint64())
}

// memoryLimit is the GOMEMLIMIT the runtime applies (math.MaxInt64 bytes when none is set).
func memoryLimit() int64 {
	sample := []metrics.Sample{{Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(sample)
	return int64(sample[0].Value.Uint64())
}

// signalName is a signal as its constant is spelled (SIGTERM), for the stop line.
func signalName(received os.Signal) string {
	if number, ok := received.(syscall.Signal); ok {
		if name := unix.SignalName(number); name != "" {
			return name
		}
	}
	return received.String()
}
