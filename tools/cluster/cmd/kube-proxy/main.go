// kube-proxy built from the k8s.io/kubernetes module pinned in ../../go.mod: Service
// routing (iptables mode) on the real nodes, so pods reach the API server and each
// other through ClusterIPs as on a cluster.
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
