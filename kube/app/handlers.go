package main

import (
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// handlers answers the application's endpoints.
type handlers struct {
	cfg     config
	ballast *ballast
	started time.Time
	sink    atomic.Uint32 // the last result of /work's hashing, kept so the work cannot be optimized away
}

// routes maps each path to its handler; every method check is inside the handler, so that a
// wrong method is answered (405) and measured under the path's own label.
func (h *handlers) routes() map[string]http.Handler {
	return map[string]http.Handler{
		"/work":    http.HandlerFunc(h.work),
		"/healthz": http.HandlerFunc(h.healthz),
		"/readyz":  http.HandlerFunc(h.readyz),
		"/alloc":   http.HandlerFunc(h.alloc),
	}
}

func (h *handlers) work(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	ms := h.cfg.workMS
	if value := r.URL.Query().Get("ms"); value != "" {
		parsed, err := parseWorkMS(value)
		if err != nil {
			http.Error(w, fmt.Sprintf("ms=%q: %v", value, err), http.StatusBadRequest)
			return
		}
		ms = parsed
	}
	h.sink.Store(uint32(burnCPU(time.Duration(ms * float64(time.Millisecond)))))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "ok %g ms\n", ms)
}

func (h *handlers) healthz(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

func (h *handlers) readyz(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	if !h.cfg.ready {
		http.Error(w, "not ready: READY=false", http.StatusServiceUnavailable)
		return
	}
	if h.cfg.unreadyAfter > 0 && time.Since(h.started) >= h.cfg.unreadyAfter {
		http.Error(w, fmt.Sprintf("not ready: UNREADY_AFTER=%s has passed", h.cfg.unreadyAfter),
			http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ready")
}

func (h *handlers) alloc(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodPost) {
		return
	}
	value := r.URL.Query().Get("mb")
	mb, err := parseAllocMB(value)
	if err != nil {
		http.Error(w, fmt.Sprintf("mb=%q: %v", value, err), http.StatusBadRequest)
		return
	}
	if err := h.ballast.grow(mb); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, "{\"held_mb\": %s}\n", strconv.FormatInt(h.ballast.bytes()/mib, 10))
}

// allow answers 405 unless r uses method (HEAD counts as GET).
func allow(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method || (method == http.MethodGet && r.Method == http.MethodHead) {
		return true
	}
	w.Header().Set("Allow", method)
	http.Error(w, fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, method), http.StatusMethodNotAllowed)
	return false
}
