// client-go-list is the reference liken-kube's LIST benchmark measures
// itself against (liken-kube/benches/list.rs): what a Go operator does
// to read every Machine, in-process, on a warm connection.
//
// It builds a client-go REST client for liken.sh/v1alpha1 from a
// kubeconfig, with typed Machine structs registered in a scheme (as a
// kubebuilder operator has them) and client-go's own JSON decoder, then
// pages through /apis/liken.sh/v1alpha1/machines with `limit` and
// `continue`, decoding every page into a typed MachineList. Client-side
// rate limiting is off (QPS < 0), because liken-kube has none and a
// throttled reference would flatter it.
//
//	client-go-list -kubeconfig FILE -limit 500 -rounds 5 -expect 5000
//
// One untimed round warms the connection and checks that -expect items
// came back; then each timed round prints `round <nanoseconds> <items>`.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

var groupVersion = schema.GroupVersion{Group: "liken.sh", Version: "v1alpha1"}

// Machine mirrors liken-api's Machine (liken-api/src/machine.rs) as a
// kubebuilder type would: the standard ObjectMeta and typed spec and
// status.
type Machine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              MachineSpec   `json:"spec,omitempty"`
	Status            MachineStatus `json:"status,omitempty"`
}

type MachineSpec struct {
	Hostname     string            `json:"hostname,omitempty"`
	RebootPolicy string            `json:"rebootPolicy,omitempty"`
	Sysctls      map[string]string `json:"sysctls,omitempty"`
	Modules      []string          `json:"modules,omitempty"`
	KernelArgs   []string          `json:"kernelArgs,omitempty"`
	Network      *NetworkSpec      `json:"network,omitempty"`
	InstallDisk  string            `json:"installDisk,omitempty"`
	K3s          *K3sSpec          `json:"k3s,omitempty"`
}

type NetworkSpec struct {
	Interfaces []InterfaceSpec `json:"interfaces,omitempty"`
	NTP        []string        `json:"ntp,omitempty"`
}

type InterfaceSpec struct {
	Name      string      `json:"name,omitempty"`
	MAC       string      `json:"mac,omitempty"`
	DHCP      bool        `json:"dhcp,omitempty"`
	Addresses []string    `json:"addresses,omitempty"`
	Routes    []RouteSpec `json:"routes,omitempty"`
	DNS       []string    `json:"dns,omitempty"`
}

type RouteSpec struct {
	To  string `json:"to"`
	Via string `json:"via"`
}

type K3sSpec struct {
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`
	NodeTaints []string          `json:"nodeTaints,omitempty"`
}

type MachineStatus struct {
	Phase              string              `json:"phase,omitempty"`
	Conditions         []metav1.Condition  `json:"conditions,omitempty"`
	Role               string              `json:"role,omitempty"`
	Boot               *json.RawMessage    `json:"boot,omitempty"`
	Release            *ReleaseStatus      `json:"release,omitempty"`
	Pending            []PendingDisruption `json:"pending,omitempty"`
	ObservedGeneration int64               `json:"observedGeneration,omitempty"`
}

type ReleaseStatus struct {
	Running string `json:"running,omitempty"`
	Staged  string `json:"staged,omitempty"`
	Target  string `json:"target,omitempty"`
}

type PendingDisruption struct {
	Condition string `json:"condition"`
	Kind      string `json:"kind"`
	Hash      string `json:"hash"`
	Summary   string `json:"summary"`
}

type MachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Machine `json:"items"`
}

// DeepCopyObject is what runtime.Object asks for; the LIST path never
// calls it, so a JSON round trip is enough.
func (m *Machine) DeepCopyObject() runtime.Object     { return roundTrip(m, &Machine{}) }
func (l *MachineList) DeepCopyObject() runtime.Object { return roundTrip(l, &MachineList{}) }

func roundTrip[T runtime.Object](from T, to T) runtime.Object {
	b, err := json.Marshal(from)
	if err != nil {
		panic(err)
	}
	if err := json.Unmarshal(b, to); err != nil {
		panic(err)
	}
	return to
}

func client(kubeconfig string) (*rest.RESTClient, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	scheme.AddKnownTypes(groupVersion, &Machine{}, &MachineList{})
	metav1.AddToGroupVersion(scheme, groupVersion)
	cfg.GroupVersion = &groupVersion
	cfg.APIPath = "/apis"
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	cfg.QPS = -1
	return rest.RESTClientFor(cfg)
}

// listAll pages through every Machine and returns how many there were.
func listAll(c *rest.RESTClient, limit int64) (int, error) {
	n, cont := 0, ""
	for {
		var page MachineList
		err := c.Get().Resource("machines").
			VersionedParams(&metav1.ListOptions{Limit: limit, Continue: cont}, metav1.ParameterCodec).
			Do(context.Background()).Into(&page)
		if err != nil {
			return n, err
		}
		n += len(page.Items)
		if cont = page.Continue; cont == "" {
			return n, nil
		}
	}
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig to use")
	limit := flag.Int64("limit", 500, "objects per page")
	rounds := flag.Int("rounds", 5, "timed rounds after the warm-up")
	expect := flag.Int("expect", -1, "the number of Machines the warm-up must find")
	flag.Parse()
	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "client-go-list: %v\n", err)
		os.Exit(1)
	}
	c, err := client(*kubeconfig)
	if err != nil {
		fail(err)
	}
	n, err := listAll(c, *limit)
	if err != nil {
		fail(err)
	}
	if *expect >= 0 && n != *expect {
		fail(fmt.Errorf("the warm-up LIST found %d Machines, not %d", n, *expect))
	}
	for i := 0; i < *rounds; i++ {
		t := time.Now()
		n, err := listAll(c, *limit)
		d := time.Since(t)
		if err != nil {
			fail(err)
		}
		fmt.Printf("round %d %d\n", d.Nanoseconds(), n)
	}
}
