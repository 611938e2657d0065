// Command etcd is the upstream etcd server, built from its published server module.
//
// Why a wrapper: `go install go.etcd.io/etcd/server/v3@...` is refused because the etcd
// repository's go.mod files use replace directives; a module of our own that requires the
// server module and calls its entry point sidesteps that.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
