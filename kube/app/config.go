package main

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// config is the application's settings, read once from the environment.
type config struct {
	listen          string
	port            string
	workMS          float64
	ready           bool
	allocMB         int
	shutdownTimeout time.Duration
	unreadyAfter    time.Duration
	exitAfter       time.Duration
}

// Limits on values that would otherwise hang or exhaust the process by a typo.
const (
	maxWorkMS  = 60_000
	maxAllocMB = 1 << 20
)

// loadConfig reads the environment through getenv; an error names the variable and the value.
func loadConfig(getenv func(string) string) (config, error) {
	cfg := config{
		listen:          getenv("LISTEN"),
		port:            "8080",
		workMS:          5,
		ready:           getenv("READY") != "false",
		shutdownTimeout: 10 * time.Second,
	}
	if value := getenv("PORT"); value != "" {
		port, err := strconv.Atoi(value)
		if err != nil || port < 0 || port > 65535 {
			return cfg, fmt.Errorf("PORT=%q is not a port number (0-65535)", value)
		}
		cfg.port = value
	}
	if value := getenv("WORK_MS"); value != "" {
		ms, err := parseWorkMS(value)
		if err != nil {
			return cfg, fmt.Errorf("WORK_MS=%q: %w", value, err)
		}
		cfg.workMS = ms
	}
	if value := getenv("ALLOC_MB"); value != "" {
		mb, err := parseAllocMB(value)
		if err != nil {
			return cfg, fmt.Errorf("ALLOC_MB=%q: %w", value, err)
		}
		cfg.allocMB = mb
	}
	for _, setting := range []struct {
		name   string
		target *time.Duration
	}{
		{"SHUTDOWN_TIMEOUT", &cfg.shutdownTimeout},
		{"UNREADY_AFTER", &cfg.unreadyAfter},
		{"EXIT_AFTER", &cfg.exitAfter},
	} {
		if value := getenv(setting.name); value != "" {
			duration, err := time.ParseDuration(value)
			if err != nil || duration < 0 {
				return cfg, fmt.Errorf("%s=%q is not a non-negative Go duration such as 10s", setting.name, value)
			}
			*setting.target = duration
		}
	}
	return cfg, nil
}

func parseWorkMS(value string) (float64, error) {
	ms, err := strconv.ParseFloat(value, 64)
	if err != nil || math.IsNaN(ms) || ms < 0 || ms > maxWorkMS {
		return 0, fmt.Errorf("not a number of milliseconds between 0 and %d", maxWorkMS)
	}
	return ms, nil
}

func parseAllocMB(value string) (int, error) {
	mb, err := strconv.Atoi(value)
	if err != nil || mb < 0 || mb > maxAllocMB {
		return 0, fmt.Errorf("not a whole number of MiB between 0 and %d", maxAllocMB)
	}
	return mb, nil
}
