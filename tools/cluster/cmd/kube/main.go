// The Kubernetes components the sandbox runs, built from the k8s.io/kubernetes module
// pinned in ../../go.mod as ONE program that runs the component it is named as (its
// argv[0]: tools/build_cluster.sh links it as kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet and kube-proxy), as hyperkube did. Each branch is the few lines
// of upstream's own main (cmd/<component>/<component>.go). One binary links once: five
// links of these were about a tenth of the first build on 2 cores.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// Each component as upstream's main runs it: cli.Run of its command, the exit code.
var components = map[string]func() int{
	"kube-apiserver":          func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int { return cli.Run(controllermanager.NewControllerManagerCommand()) },
	"kube-scheduler":          func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubelet":                 func() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) },
	"kube-proxy":              func() int { return cli.Run(proxy.NewProxyCommand()) },
}

func main() {
	name := filepath.Base(os.Args[0])
	run, ok := components[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "%s: run me as one of kube-apiserver, kube-controller-manager, "+
			"kube-scheduler, kubelet or kube-proxy (a link by that name)\n", name)
		os.Exit(2)
	}
	os.Exit(run())
}
