package main

import (
	"crypto/sha256"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// burnCPU spends d of CPU time on the calling goroutine and returns a value derived from the
// work (so the compiler cannot drop it).
//
// The cost is measured, not calibrated: the goroutine is locked to its OS thread and hashes in
// small chunks until the thread's own CPU clock (CLOCK_THREAD_CPUTIME_ID) has advanced by d.
// That clock moves only while the thread runs on a CPU, so a request costs d of CPU whatever the
// load: when a CFS quota throttles the container, or other requests compete for the cores, the
// same CPU cost takes longer in wall time and the measured latency rises, which is the effect an
// optimizer of CPU limits must see. A loop calibrated once at start (N hashes ≈ 1 ms) would be
// wrong by however busy the machine was while calibrating, and a wall-clock spin would cost less
// CPU, not more time, under throttling.
func burnCPU(d time.Duration) byte {
	if d <= 0 {
		return 0
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPUTime()
	var chunk [burnChunk]byte
	var sum [sha256.Size]byte
	for threadCPUTime()-start < d {
		// One chunk hashes in about 5-10 µs: the overshoot past d is that plus one clock read.
		for i := 0; i < burnRounds; i++ {
			sum = sha256.Sum256(chunk[:])
			chunk[0] ^= sum[0]
		}
	}
	return sum[0]
}

const (
	burnChunk  = 1024
	burnRounds = 4
)

// threadCPUTime is the CPU time the calling OS thread has used.
func threadCPUTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		// Linux has had this clock since 2.6.12; without it no request could cost anything.
		panic("clock_gettime(CLOCK_THREAD_CPUTIME_ID): " + err.Error())
	}
	return time.Duration(ts.Nano())
}
