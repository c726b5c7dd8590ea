//! `liken-standin-k3s probe <port>`: a test workload, run as a container
//! by the node stand-in (the stand-in binary packed as an OCI image), to
//! show what a pod gets: it says which node and environment it was given,
//! asks the apiserver who its token is (a SelfSubjectReview through the
//! in-cluster configuration, as the operators connect), whether its root
//! is read-only and its host paths writable, and serves `/healthz` on
//! `<port>` for a liveness probe. Every line starts with
//! `liken-standin-k3s: probe:`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use liken_kube::{Client, Config};
use serde_json::json;

fn say(text: &str) {
    println!("liken-standin-k3s: probe: {text}");
}

/// Runs the probe forever.
pub fn run(port: &str) -> ! {
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    say(&format!(
        "node {} pod {}/{} apiserver {}:{} pid {}",
        env("NODE_NAME"),
        env("POD_NAMESPACE"),
        env("POD_NAME"),
        env("KUBERNETES_SERVICE_HOST"),
        env("KUBERNETES_SERVICE_PORT"),
        std::process::id()
    ));
    let root_writable = std::fs::write("/probe-write-test", b"x").is_ok();
    let host_writable = std::fs::write("/var/lib/liken/probe-write-test", b"x").is_ok();
    say(&format!(
        "root filesystem writable: {root_writable}; /var/lib/liken writable: {host_writable}"
    ));
    let review = Config::in_cluster()
        .map_err(|e| e.to_string())
        .and_then(|c| Client::new(&c).map_err(|e| e.to_string()))
        .and_then(|client| {
            let req = liken_kube::Request {
                method: liken_kube::request::Method::Post,
                path: "/apis/authentication.k8s.io/v1/selfsubjectreviews".into(),
                query: Vec::new(),
                body: Some(
                    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
                        .to_string()
                        .into_bytes(),
                ),
                content_type: Some(liken_kube::request::JSON),
                timeout: None,
            };
            client.send(&req).map_err(|e| e.to_string())
        })
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).map_err(|e| e.to_string()));
    match review {
        Ok(v) => {
            let info = &v["status"]["userInfo"];
            say(&format!(
                "the apiserver says this token is {} bound to node {}",
                info["username"].as_str().unwrap_or("?"),
                info["extra"]["authentication.kubernetes.io/node-name"][0]
                    .as_str()
                    .unwrap_or("(none)")
            ));
        }
        Err(e) => say(&format!("SelfSubjectReview failed: {e}")),
    }
    let listener = match TcpListener::bind(("0.0.0.0", port.parse().unwrap_or(9201))) {
        Ok(l) => l,
        Err(e) => {
            say(&format!("cannot listen on {port}: {e}"));
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
    };
    say(&format!("serving /healthz on :{port}"));
    for conn in listener.incoming().flatten() {
        let mut conn = conn;
        let mut buf = [0u8; 1024];
        let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = conn.read(&mut buf);
        let _ =
            conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
