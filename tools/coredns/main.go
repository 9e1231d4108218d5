// CoreDNS v1.15.0 with the plugins the real nodes' cluster DNS uses (kubeadm's Corefile,
// less prometheus and loop, plus bind), built from the Go module proxy by
// tools/build_images.sh. coremain runs the plugins named in dnsserver.Directives, in
// that order; the order is CoreDNS's own (its plugin.cfg).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "loadbalance",
		"cache", "kubernetes", "forward"}
}

func main() { coremain.Run() }
