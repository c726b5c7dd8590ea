//! Interop tests: the `liken` binary against the real tools that read what
//! it writes (GNU cpio, OpenSSL, kubectl and a kube-apiserver, bash, a
//! pseudo-terminal, and Go's crypto/x509 for the token hash).

mod cli;
mod fleet;
mod identity_openssl;
mod kubectl;
mod layer_cpio;
mod new_pty;
mod passthrough;
mod plugins;
mod reboot;
mod support;
mod token_hash_go;
