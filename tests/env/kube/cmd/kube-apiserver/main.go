// Command kube-apiserver is the upstream API server, built from published modules for the
// jointer test environment (see ../../regen-gomod.sh for why a wrapper is needed).
package main

import (
	"os"
	// CronJob time zones are validated against the embedded tz database.
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	// Side-effect registrations the upstream binary also has: JSON logging and the
	// client-go / version metrics.
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
