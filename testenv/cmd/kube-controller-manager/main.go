// Code in this file mirrors the upstream main package at the pinned
// Kubernetes version (k8s.io/kubernetes/cmd/kube-controller-manager); keep it in sync when
// bumping KUBE_VERSION in versions.env.
package main

import (
	"os"
	_ "time/tzdata" // time zone support (CronJob), as upstream

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
