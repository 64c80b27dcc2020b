package main

import (
	"fmt"
	"os"
	"sync"
)

// ballast is memory the application holds on purpose: allocated, written to (every page, so the
// kernel really commits it and it counts against the cgroup's memory limit) and kept reachable.
type ballast struct {
	mu     sync.Mutex
	chunks [][]byte
}

const mib = 1 << 20

// grow adds mb MiB; the total held is then bytes().
func (b *ballast) grow(mb int) error {
	if mb < 0 || mb > maxAllocMB {
		return fmt.Errorf("cannot allocate %d MiB (0-%d)", mb, maxAllocMB)
	}
	page := os.Getpagesize()
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := 0; i < mb; i++ {
		chunk := make([]byte, mib)
		for offset := 0; offset < len(chunk); offset += page {
			chunk[offset] = 1
		}
		b.chunks = append(b.chunks, chunk)
	}
	return nil
}

// bytes is how much is held.
func (b *ballast) bytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return int64(len(b.chunks)) * mib
}
