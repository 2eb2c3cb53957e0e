// kubelet, as k8s.io/kubernetes/cmd/kubelet builds it: the real node of `kappa cluster start --node`
// (tools/cluster.mk, node-tools). Kept out of ./cmd so that `make test` does not build it.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
