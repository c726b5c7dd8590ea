//! The start-up both operators share: the `--kubeconfig` and
//! `--metrics-address` flags, the client they make from the credentials
//! (named after the program and counting its requests in the process's
//! metrics registry), the first log line, and the metrics listener.
//!
//! Each operator registers its own metrics in the registry this returns
//! before it serves it, so the first scrape sees all of them.

use std::fmt::Display;
use std::path::Path;

use liken_kube::metrics::{self, MetricsServer, Registry};
use liken_kube::{Client, ConfigError};

use crate::runtime::credentials;
use crate::runtime::flags::Flag;
use crate::runtime::log;

/// `--kubeconfig`, read by [`connect`] in kubectl's order.
pub const KUBECONFIG_FLAG: Flag = Flag {
    name: "kubeconfig",
    value: Some("FILE"),
    default: None,
    env: None,
    help: "the kubeconfig to use; else KUBECONFIG, the pod's service account, or ~/.kube/config",
};

/// `--metrics-address`, read by [`listen_address`].
pub const METRICS_ADDRESS_FLAG: Flag = Flag {
    name: "metrics-address",
    value: Some("ADDR"),
    default: Some(":9200"),
    env: None,
    help: "where /metrics and /healthz are served; empty serves nothing",
};

/// The address to listen on for a `--metrics-address` value: empty
/// serves nothing, and `:9200` means every address, as Go programs read
/// it.
pub fn listen_address(flag: Option<&str>) -> Option<String> {
    match flag.unwrap_or_default() {
        "" => None,
        a if a.starts_with(':') => Some(format!("0.0.0.0{a}")),
        a => Some(a.to_owned()),
    }
}

/// Loads the credentials (`kubeconfig` is the flag's value), makes a
/// client that names itself `program` and counts its requests in a new
/// registry, and logs the "starting" line with the program's own
/// `fields` after the version, the credentials and the server.
pub fn connect(
    program: &str,
    kubeconfig: Option<&Path>,
    fields: &[(&str, &dyn Display)],
) -> Result<(Client, Registry), ConfigError> {
    let (config, source) = credentials::load(kubeconfig)?;
    let registry = Registry::new();
    let client = Client::new(&config)?
        .identify(program, liken_api::BUILD_VERSION)
        .with_metrics(&registry);
    let mut line: Vec<(&str, &dyn Display)> = vec![
        ("version", &liken_api::BUILD_VERSION),
        ("credentials", &source),
        ("server", &config.server),
    ];
    line.extend_from_slice(fields);
    log::info("starting", &line);
    Ok((client, registry))
}

/// The metrics listener could not be opened.
#[derive(Debug)]
pub struct MetricsError {
    /// The address.
    pub address: String,
    /// Why.
    pub error: std::io::Error,
}

impl Display for MetricsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "serving metrics on {}: {}; pass --metrics-address with a free port, or an empty \
             value to serve none",
            self.address, self.error
        )
    }
}

impl std::error::Error for MetricsError {}

/// Serves `registry` on `address` (from [`listen_address`]; `None`
/// serves nothing) and logs where.
pub fn serve_metrics(
    address: Option<&str>,
    registry: &Registry,
) -> Result<Option<MetricsServer>, MetricsError> {
    let Some(address) = address else {
        return Ok(None);
    };
    let server = metrics::serve(address, registry.clone()).map_err(|error| MetricsError {
        address: address.to_owned(),
        error,
    })?;
    log::info("serving metrics", &[("metrics", &server.local_addr())]);
    Ok(Some(server))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_go_style_port_listens_everywhere_and_empty_serves_nothing() {
        for (flag, want) in [
            (None, None),
            (Some(""), None),
            (Some(":9200"), Some("0.0.0.0:9200")),
            (Some("127.0.0.1:0"), Some("127.0.0.1:0")),
            (Some("[::1]:9200"), Some("[::1]:9200")),
        ] {
            assert_eq!(listen_address(flag).as_deref(), want, "{flag:?}");
        }
    }

    #[test]
    fn a_taken_port_says_how_to_choose_another() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = taken.local_addr().unwrap().to_string();
        let Err(e) = serve_metrics(Some(&address), &Registry::new()) else {
            panic!("served metrics on a taken port");
        };
        assert!(e.to_string().contains("--metrics-address"), "{e}");
        assert!(serve_metrics(None, &Registry::new()).unwrap().is_none());
    }
}
