// kube-router, as github.com/cloudnativelabs/kube-router/v2/cmd/kube-router builds it, run on the
// real node of `kappa cluster start` with only its NetworkPolicy firewall (--run-firewall=true
// --run-router=false --run-service-proxy=false; tools/cluster.mk, node-tools). Upstream's main
// package cannot be imported, so its few lines of flag handling are repeated here; the work is
// done by its pkg/cmd. Without --enable-pprof nothing listens on :6060.
package main

import (
	"flag"
	"fmt"
	"net/http"
	_ "net/http/pprof" // served only with --enable-pprof, as upstream
	"os"
	"time"

	"github.com/cloudnativelabs/kube-router/v2/pkg/cmd"
	"github.com/cloudnativelabs/kube-router/v2/pkg/options"
	"github.com/cloudnativelabs/kube-router/v2/pkg/version"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "%s\n", err)
		os.Exit(1)
	}
}

func run() error {
	klog.InitFlags(nil)
	config := options.NewKubeRouterConfig()
	config.AddFlags(pflag.CommandLine)
	pflag.Parse()
	// klog's flags live on the standard flag set, which pflag does not parse (kubernetes#17162).
	if err := flag.CommandLine.Parse(nil); err != nil {
		return fmt.Errorf("failed to parse flags: %w", err)
	}
	if err := flag.Set("logtostderr", "true"); err != nil {
		return err
	}
	if err := flag.Set("v", config.VLevel); err != nil {
		return err
	}

	switch {
	case config.HelpRequested:
		pflag.Usage()
		return nil
	case config.Version:
		version.PrintVersion(false)
		return nil
	case os.Geteuid() != 0:
		return fmt.Errorf("kube-router needs to be run with privileges to execute iptables, ipset and configure ipvs")
	case config.CleanupConfig:
		cmd.CleanupConfigAndExit()
		return nil
	}

	kubeRouter, err := cmd.NewKubeRouterDefault(config)
	if err != nil {
		return fmt.Errorf("failed to parse kube-router config: %w", err)
	}
	if config.EnablePprof {
		go func() {
			server := http.Server{Addr: "0.0.0.0:6060", ReadHeaderTimeout: 5 * time.Second}
			fmt.Fprintf(os.Stdout, "%s\n", server.ListenAndServe())
		}()
	}
	if err := kubeRouter.Run(); err != nil {
		return fmt.Errorf("failed to run kube-router: %w", err)
	}
	return nil
}
