// kube-proxy, as k8s.io/kubernetes/cmd/kube-proxy builds it: Service IPs on the real node of
// `kappa cluster start` (iptables mode: this machine has no IPVS; tools/node/kube-proxy.yaml).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
