// One program for the six Kubernetes commands a node and its control plane
// run, chosen by the name it is started under, as k3s carries them in its
// own single binary (k3s-io/k3s scripts/package-cli links each command's
// name to it) and as Kubernetes itself once shipped them as "hyperkube".
// Linked once, the six share their common code: about 140 MB against
// about 490 MB as six programs, which every release of the upstream node
// carries, every slot write copies and every first boot unpacks.
//
// Each case mirrors the upstream main package at the pinned Kubernetes
// version (k8s.io/kubernetes/cmd/<name>); keep them in sync when bumping
// KUBE_VERSION in ../../../versions.env.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	_ "time/tzdata" // time zone support (CronJob), as the control plane's mains

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's client auth plugins
)

// The commands, by the name the program is started under.
var commands = map[string]func() int{
	"kube-apiserver": func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int {
		return cli.Run(controllermanager.NewControllerManagerCommand())
	},
	"kube-scheduler": func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubelet":        func() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) },
	"kube-proxy":     func() int { return cli.Run(proxy.NewProxyCommand()) },
	"kubectl": func() int {
		// Verbosity before the command is built, as kubectl's main does.
		logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) // nolint:errcheck
		if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
			util.CheckErr(err)
		}
		return 0
	},
}

func main() {
	name := filepath.Base(os.Args[0])
	run, ok := commands[name]
	if !ok {
		names := make([]string, 0, len(commands))
		for n := range commands {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "hyperkube: started as %q, which is none of its commands; "+
			"start it through a link named one of: %s\n", name, strings.Join(names, ", "))
		os.Exit(2)
	}
	os.Exit(run())
}
