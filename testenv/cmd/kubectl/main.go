// Code in this file mirrors the upstream main package at the pinned
// Kubernetes version (k8s.io/kubernetes/cmd/kubectl); keep it in sync when
// bumping KUBE_VERSION in versions.env. The tests run this kubectl, the
// same release as the control plane, rather than whatever kubectl the
// machine has on PATH.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // client auth plugins, as upstream
)

func main() {
	// Verbosity before the command is built, as upstream does.
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
