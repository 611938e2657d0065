// Command kubectl is the upstream CLI, built alongside the control plane so humans and
// scripts in the test environment have a client of the same version.
package main

import (
	"os"

	// Registers the client auth plugins (exec, oidc) kubeconfigs may refer to.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	// -v must take effect before flag parsing, because building the command tree
	// (plugins, .kuberc) already logs.
	_, _ = logs.GlogSetter(cmd.GetLogVerbosity(os.Args))
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
