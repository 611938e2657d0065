// Prints the CRDs upstream Karpenter's AWS provider embeds in its Go module (pkg/apis:
// NodePool, NodeClaim, EC2NodeClass, NodeOverlay), as YAML documents: jointer's API is
// measured against these, never against an imitation of them.
package main

import (
	"fmt"
	"os"

	"github.com/aws/karpenter-provider-aws/pkg/apis"
)

func main() {
	for _, crd := range [][]byte{apis.NodePoolCRD, apis.NodeClaimCRD, apis.EC2NodeClassCRD, apis.NodeOverlayCRD} {
		if _, err := fmt.Fprintf(os.Stdout, "---\n%s\n", crd); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
