//! A control plane that runs on a deployment's own identity, the way k3s
//! would: the apiserver serves with a certificate from the minted server
//! CA, trusts the minted client CA and signs tokens with the minted service
//! key, so the credential `liken kubeconfig` writes is an admin on it.
//!
//! [`shared`] is one such fleet per test binary (a `liken new` deployment
//! named home and its control plane), for the tests of the commands that
//! act on a running cluster. Tests that write Machines and count the
//! writes hold [`writes_lock`] so their counts are their own.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use liken_cli::identity::kubeconfig;
use liken_testenv::ControlPlane;
use liken_testenv::pki::{Pair, Pki};

use crate::kubectl::{read, serving_cert};
use crate::support::{Scratch, deployment};

/// Starts a control plane on the identity at `id`. Its own client (it
/// applies the CRDs) is an admin under the minted client CA, made by the
/// same code `kubeconfig` uses.
pub fn control_plane_on(id: &Path) -> ControlPlane {
    let (admin_cert, admin_key) = kubeconfig::admin_credential(
        read(id, "server/tls/client-ca.crt").as_bytes(),
        read(id, "server/tls/client-ca.key").as_bytes(),
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    let admin = Pair {
        cert_pem: admin_cert,
        key_pem: admin_key,
    };
    let service_key = read(id, "server/tls/service.key");
    let pki = Pki {
        ca: Pair {
            cert_pem: read(id, "server/tls/server-ca.crt"),
            key_pem: read(id, "server/tls/server-ca.key"),
        },
        apiserver: serving_cert(id),
        admin: admin.clone(),
        controller_manager: admin,
        // Both flags get the file itself, as k3s passes service.key.
        sa_key_pem: service_key.clone(),
        sa_pub_pem: service_key,
        client_ca_pem: Some(read(id, "server/tls/client-ca.crt")),
        client_ca_key_pem: None,
        request_header_ca_pem: None,
    };
    liken_testenv::start_with_pki(liken_testenv::Options::default(), pki)
        .unwrap_or_else(|e| panic!("starting the control plane: {e}"))
}

/// A deployment and the control plane on its identity.
pub struct Fleet {
    _scratch: Scratch,
    /// The deployment directory (`liken new` with node-1 and node-2).
    pub dep: PathBuf,
    /// Its control plane.
    pub cp: ControlPlane,
}

/// The fleet shared by this test binary, started on first use.
pub fn shared() -> &'static Fleet {
    static FLEET: OnceLock<Fleet> = OnceLock::new();
    FLEET.get_or_init(|| {
        let scratch = Scratch::new("fleet");
        let dep = scratch.path().join("home");
        deployment(&dep);
        let cp = control_plane_on(&dep.join("identity"));
        Fleet {
            _scratch: scratch,
            dep,
            cp,
        }
    })
}

/// Held by tests that count Machine writes, so no other test writes
/// Machines meanwhile.
pub fn writes_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}
