// Command registry is the CNCF distribution registry (the reference OCI registry), built
// from its published module with only the pieces the test environment uses: filesystem and
// in-memory storage, htpasswd authentication.
//
// Why a wrapper: upstream's cmd/registry also links the S3, GCS and Azure storage drivers
// and their SDKs, which would triple the build for nothing used here.
//
// `registry bcrypt` (ours, not upstream's) reads a password on stdin and prints its bcrypt
// hash, for the htpasswd file up.sh writes: no htpasswd tool or Python bcrypt is needed. The
// minimum cost, because the registry checks the hash on every request.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"golang.org/x/crypto/bcrypt"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "bcrypt" {
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil && line == "" {
			fmt.Fprintln(os.Stderr, "registry bcrypt: no password on stdin")
			os.Exit(2)
		}
		hash, err := bcrypt.GenerateFromPassword([]byte(strings.TrimRight(line, "\r\n")), bcrypt.MinCost)
		if err != nil {
			fmt.Fprintln(os.Stderr, "registry bcrypt:", err)
			os.Exit(1)
		}
		fmt.Println(string(hash))
		return
	}
	// Exits non-zero itself when the command fails.
	registry.RootCmd.Execute() //nolint:errcheck
}
