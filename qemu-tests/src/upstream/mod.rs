//! The upstream node launcher (`liken-upstream-k3s`): placed at k3s's
//! path in a test release, it does what k3s's own glue does for a node,
//! with k3s's paths and defaults, but runs the parts k3s is made of as
//! their own programs, built by testenv from their projects: containerd
//! v2 with its runc shim and runc, the kubelet, kube-proxy, the CNI
//! plugins and kubectl. k3s cannot be downloaded here; these can.
//!
//! - [`bundle`]: the programs ride inside the launcher's file and are
//!   unpacked into `<data-dir>/data/<sha256>/bin`, as k3s unpacks its own;
//! - [`config`]: k3s's config.yaml, as liken-init renders it;
//! - [`join`]: the agent token checked against the server CA and turned
//!   into the kubelet's bootstrap credential;
//! - [`containerd`], [`airgap`], [`kubelet`], [`cni`]: each part as k3s
//!   configures it, pure where it can be;
//! - [`syssetup`]: the modules and sysctls k3s's agent sets up;
//! - [`children`]: running them, each dying with the launcher;
//! - [`agent`]: `k3s agent` in k3s's order;
//! - [`certs`], [`control`], [`deploy`]: a server's leaf certificates
//!   and kubeconfigs, its control plane's arguments and its deploy
//!   controller, as k3s makes and runs them;
//! - [`server`]: `k3s server` in k3s's order: etcd, kube-apiserver,
//!   k3s.yaml, the agent token registered, kube-controller-manager,
//!   kube-scheduler, the manifests, then the agent half joining it.
//!
//! Every line it prints says it is not k3s ([`console`]).

pub mod agent;
pub mod airgap;
pub mod bundle;
pub mod certs;
pub mod children;
pub mod cni;
pub mod config;
pub mod console;
pub mod containerd;
pub mod control;
pub mod deploy;
pub mod join;
pub mod kubelet;
pub mod server;
pub mod syssetup;
