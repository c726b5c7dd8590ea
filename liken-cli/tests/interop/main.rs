//! Interop tests: the `liken` binary against the real tools that read what
//! it writes (GNU cpio, OpenSSL, kubectl and a kube-apiserver, bash, a
//! pseudo-terminal).

mod cli;
mod identity_openssl;
mod kubectl;
mod layer_cpio;
mod new_pty;
mod support;
