// pause: the process of a pod sandbox (containerd's sandbox_image, tools/node/containerd.toml).
// It holds the pod's namespaces open until it is told to stop, and as PID 1 of a pod that shares
// its process namespace it reaps the orphans re-parented to it. Written here: the upstream pause
// image (registry.k8s.io) cannot be pulled on this machine.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	children := make(chan os.Signal, 16)
	signal.Notify(children, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-children:
			for {
				var status syscall.WaitStatus
				if pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil); pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
