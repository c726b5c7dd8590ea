// Wrapper main for the etcd server, equivalent to upstream
// go.etcd.io/etcd/server/v3/main.go at the pinned ETCD_VERSION.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
