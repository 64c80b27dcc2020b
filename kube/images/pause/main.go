// Command pause is the sandbox ("pause") process of a pod on servo-actors' real node: PID 1 of
// the pod's namespaces. It holds them open by doing nothing, reaps every child that is re-parented
// to it (so an orphan that exits never stays a zombie), and exits 0 on SIGTERM or SIGINT.
// Standard library only; built static (CGO_ENABLED=0) by scripts/build-image.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	// Said once the handlers are ours: before this line a SIGTERM or SIGINT still has Go's
	// default effect (the process dies of it).
	fmt.Fprintln(os.Stderr, "pause: running, exits 0 on SIGTERM or SIGINT")
	// Children that exited before the handler was installed are reaped too.
	reap()
	for received := range signals {
		if received == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: %v, exiting\n", received)
		os.Exit(0)
	}
}

// reap waits for every child that has exited, without blocking: SIGCHLD signals coalesce, so
// one signal may stand for many exits.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
