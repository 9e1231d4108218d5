// etcd built from go.etcd.io/etcd/server/v3 (its own go.mod has replace lines,
// so `go install` of it is refused): the same entry point as its main.go.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
