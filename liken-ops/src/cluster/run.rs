//! Running the cluster operator: flags, the election, the loop.
//!
//! Every copy starts the same way: credentials (kubectl's order), the
//! metrics listener (a standby serves its own metrics and `/healthz`
//! too), and the election on the Lease `liken-system/liken-cluster-operator`.
//! Only the copy that holds it opens the watches, so a standby keeps no
//! copy of the fleet and opens no stream. The acting copy sweeps every
//! `--sweep-interval` and on each wake until:
//!
//! - SIGTERM or SIGINT: the loop ends between two sweeps (the writes of
//!   one sweep belong together), the Events it queued are flushed, and
//!   only then is the Lease released, so a waiting copy takes over at
//!   once and after the last write. A flush that does not finish in time
//!   leaves the Lease to expire instead, after any write still in flight
//!   could land.
//! - The lead is lost (a renewal missed its deadline): the process ends
//!   with an error and the kubelet restarts it as a standby. A new leader
//!   is always a new process, with an empty heartbeat record.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, bounded, select, tick};
use liken_api::coordination::{CLUSTER_OPERATOR, HEARTBEAT_LABEL, HEARTBEAT_NAMESPACE};
use liken_api::signing::TrustRoot;
use liken_kube::election::{Callbacks, ElectionConfig, Elector, Timings};
use liken_kube::events::{Recorder, RecorderConfig};
use liken_kube::metrics;
use liken_kube::wake_channel;
use liken_releases::{client as release_client, fetch};

use super::channel::{Fetch, Poller};
use super::heartbeat::Sightings;
use super::metrics::{ClusterMetrics, ErrorKind};
use super::sweep::{Limits, Sweeper};
use super::watches::Watches;
use crate::runtime::flags::{Flag, Program, Values};
use crate::runtime::log;
use crate::runtime::signals::Stop;
use crate::runtime::start::{self, KUBECONFIG_FLAG, METRICS_ADDRESS_FLAG, listen_address};

/// The program and its flags.
pub const PROGRAM: Program = Program {
    name: CLUSTER_OPERATOR,
    about: "liken-cluster-operator watches a liken fleet from inside its cluster: it marks \
            silent machines Lost, writes the Cluster's status, and hands out reboot turns \
            under the disruption budget. One copy acts at a time (leader election on the \
            Lease liken-system/liken-cluster-operator).",
    flags: &[
        KUBECONFIG_FLAG,
        METRICS_ADDRESS_FLAG,
        Flag {
            name: "identity",
            value: Some("NAME"),
            default: None,
            env: Some("POD_NAME"),
            help: "this copy's name in the election; else the hostname and process id",
        },
        Flag {
            name: "cluster-file",
            value: Some("PATH"),
            default: None,
            env: None,
            help: "the deployment's cluster.yaml: the operator acts only on the Cluster it names, \
                   and creates it from this copy when the API has none (required)",
        },
        Flag {
            name: "trust-file",
            value: Some("PATH"),
            default: None,
            env: None,
            help: "the deployment's trust.yaml: channel.yaml is taken only when a key it lists \
                   signed it; a path that does not exist means the deployment is unsigned \
                   (packed with `liken layer -unsigned`) and channel answers are unverified",
        },
        Flag {
            name: "sweep-interval",
            value: Some("DURATION"),
            default: Some("10s"),
            env: None,
            help: "the longest time between two sweeps",
        },
        Flag {
            name: "heartbeat-stale-after",
            value: Some("DURATION"),
            default: Some("40s"),
            env: None,
            help: "a machine whose heartbeat Lease is not renewed for this long is Lost",
        },
        Flag {
            name: "rollout-stall-after",
            value: Some("DURATION"),
            default: Some("30m"),
            env: None,
            help: "a reboot turn held this long turns Progressing to RolloutStalled",
        },
        Flag {
            name: "channel-poll-interval",
            value: Some("DURATION"),
            default: Some("6h"),
            env: None,
            help: "how often the release channel is asked for its latest release",
        },
        Flag {
            name: "lease-duration",
            value: Some("DURATION"),
            default: Some("15s"),
            env: None,
            help: "the election Lease's term",
        },
        Flag {
            name: "renew-deadline",
            value: Some("DURATION"),
            default: Some("10s"),
            env: None,
            help: "the acting copy stops writing if it cannot renew for this long",
        },
        Flag {
            name: "retry-period",
            value: Some("DURATION"),
            default: Some("2s"),
            env: None,
            help: "how often the election is tried and renewed",
        },
    ],
};

/// The operator's settings, from its flags.
#[derive(Clone, Debug)]
pub struct Options {
    /// `--kubeconfig`.
    pub kubeconfig: Option<std::path::PathBuf>,
    /// `--metrics-address`; `None` serves nothing.
    pub metrics_address: Option<String>,
    /// `--identity`.
    pub identity: String,
    /// `--cluster-file`, read: the deployment's Cluster.
    pub cluster: liken_api::Cluster,
    /// `--trust-file`, read: the keys channel.yaml must be signed by
    /// (`None`: unsigned deployment, or no flag).
    pub trust: Option<TrustRoot>,
    /// `--sweep-interval`.
    pub sweep_interval: Duration,
    /// `--heartbeat-stale-after`.
    pub stale_after: Duration,
    /// `--rollout-stall-after`.
    pub stall_after: Duration,
    /// `--channel-poll-interval`.
    pub poll_interval: Duration,
    /// The election's timings.
    pub timings: Timings,
}

/// Why the operator stopped with an error.
#[derive(Debug)]
pub enum Error {
    /// A flag's value is wrong.
    Flag(String),
    /// No usable credentials.
    Config(liken_kube::ConfigError),
    /// The metrics listener could not be opened.
    Metrics(start::MetricsError),
    /// A thread or the Events recorder could not start.
    Start(String),
    /// This copy lost the lead; a new process starts as a standby.
    LostLead,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Flag(m) => write!(f, "liken-cluster-operator: {m}"),
            Error::Config(e) => write!(f, "liken-cluster-operator: {e}"),
            Error::Metrics(e) => write!(f, "liken-cluster-operator: {e}"),
            Error::Start(m) => write!(f, "liken-cluster-operator: {m}"),
            Error::LostLead => f.write_str(
                "liken-cluster-operator: lost the leader Lease; exiting so a new process \
                 starts as a standby",
            ),
        }
    }
}

impl std::error::Error for Error {}

impl Options {
    /// Reads the parsed flags.
    pub fn from_values(v: &Values) -> Result<Options, Error> {
        let duration = |name: &str| -> Result<Duration, Error> {
            match v.duration(name) {
                Ok(Some(d)) if !d.is_zero() => Ok(d),
                Ok(_) => Err(Error::Flag(format!("--{name} must be longer than zero"))),
                Err(e) => Err(Error::Flag(e.to_string())),
            }
        };
        let timings = Timings {
            lease_duration: duration("lease-duration")?,
            renew_deadline: duration("renew-deadline")?,
            retry_period: duration("retry-period")?,
        };
        timings.check().map_err(Error::Flag)?;
        let identity = match v.get("identity").filter(|s| !s.is_empty()) {
            Some(i) => i.to_owned(),
            None => {
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|h| h.trim().to_owned())
                    .unwrap_or_default();
                format!("{host}_{}", std::process::id())
            }
        };
        Ok(Options {
            kubeconfig: v.get("kubeconfig").map(Into::into),
            metrics_address: listen_address(v.get("metrics-address")),
            identity,
            sweep_interval: duration("sweep-interval")?,
            stale_after: duration("heartbeat-stale-after")?,
            stall_after: duration("rollout-stall-after")?,
            poll_interval: duration("channel-poll-interval")?,
            timings,
            // Last, so a bad interval is reported before a missing file.
            cluster: deployment_cluster(v)?,
            trust: match v.get("trust-file").filter(|s| !s.is_empty()) {
                Some(path) => super::deployment::read_trust(std::path::Path::new(path))
                    .map_err(Error::Flag)?,
                None => None,
            },
        })
    }
}

/// The deployment's Cluster, from `--cluster-file`.
fn deployment_cluster(v: &Values) -> Result<liken_api::Cluster, Error> {
    match v.get("cluster-file").filter(|s| !s.is_empty()) {
        Some(path) => super::deployment::read_copy(std::path::Path::new(path)).map_err(Error::Flag),
        None => Err(Error::Flag(
            "--cluster-file is required: the deployment's cluster.yaml names the one Cluster \
             this operator acts on"
                .into(),
        )),
    }
}

/// Runs the operator until `stop` delivers or the lead is lost.
pub fn run(options: Options, stop: Receiver<Stop>) -> Result<(), Error> {
    let (client, registry) = start::connect(
        CLUSTER_OPERATOR,
        options.kubeconfig.as_deref(),
        &[("identity", &options.identity)],
    )
    .map_err(Error::Config)?;
    let standard = metrics::standard(&registry);
    let cluster_metrics = ClusterMetrics::register(&registry);
    let _server = start::serve_metrics(options.metrics_address.as_deref(), &registry)
        .map_err(Error::Metrics)?;

    let (lost_tx, lost_rx) = bounded::<()>(1);
    let elector = Elector::start(
        client.clone(),
        ElectionConfig {
            namespace: HEARTBEAT_NAMESPACE.into(),
            name: CLUSTER_OPERATOR.into(),
            identity: options.identity.clone(),
            timings: options.timings,
            // The heartbeat watch delivers this Lease too, and the sweep
            // judges the watch by it (super::freshness).
            labels: [(
                HEARTBEAT_LABEL.to_owned(),
                super::freshness::ELECTION_LABEL_VALUE.to_owned(),
            )]
            .into(),
        },
        Callbacks::default()
            .on_started_leading(|| log::info("took the leader Lease; acting", &[]))
            .on_stopped_leading(move || {
                let _ = lost_tx.try_send(());
            })
            .on_new_leader(|who| log::info("the acting copy is", &[("leader", &who)]))
            .report(Arc::new(|line| log::warn(line, &[]))),
    )
    .map_err(Error::Start)?;
    elector.register(&registry, Duration::from_secs(20));

    // A standby waits here, watching nothing.
    loop {
        if elector.wait_leading(Duration::from_millis(500)) {
            break;
        }
        if stop.try_recv().is_ok() {
            log::info("stopping before taking the lead", &[]);
            elector.shutdown();
            return Ok(());
        }
    }

    let writer = client.with_write_guard(Arc::new(elector.guard()));
    let recorder = Recorder::start(
        writer.clone(),
        RecorderConfig::new("liken.sh/cluster-operator", options.identity.clone()),
    )
    .map_err(Error::Start)?;
    let (wake_tx, wake_rx) = wake_channel();
    let sightings = Arc::new(Mutex::new(Sightings::new()));
    let watches = Watches::start(
        &client,
        &wake_tx,
        sightings.clone(),
        &registry,
        Arc::new(|line| log::warn(line, &[])),
    );
    let poll_metrics = cluster_metrics.clone();
    let agent = release_client::agent();
    let fetch: Fetch = Box::new(move |source: &str| {
        let source = release_client::normalize_source(source)
            .ok_or_else(|| format!("spec.releases.source {source:?} is not an http(s) URL"))?;
        fetch::latest_document(&agent, source).map_err(|e| e.to_string())
    });
    match &options.trust {
        Some(t) => log::info(
            "channel.yaml is taken only when signed by a key the deployment trusts",
            &[("keys", &t.ids().join(","))],
        ),
        None => log::warn(
            "the deployment carries no trust root; channel answers are taken unverified",
            &[],
        ),
    }
    let poller = Poller::start(
        fetch,
        options.trust.clone(),
        options.poll_interval,
        Box::new(move |source, error| {
            poll_metrics.error(ErrorKind::Channel);
            log::warn(
                "polling the release channel; keeping the last answer",
                &[("source", &source), ("error", &error)],
            );
        }),
    )
    .map_err(|e| Error::Start(format!("starting the channel poller: {e}")))?;
    let mut sweeper = Sweeper::new(
        writer,
        watches,
        sightings,
        recorder,
        poller,
        cluster_metrics,
        Limits {
            stale_after: options.stale_after,
            stall_after: options.stall_after,
        },
        super::deployment::Deployment::new(options.cluster.clone()),
        elector.guard(),
    );

    let ticker = tick(options.sweep_interval);
    let outcome = loop {
        let started = Instant::now();
        if let Err(e) = sweeper.sweep() {
            standard.reconcile_errors.inc();
            log::warn("the sweep stopped short", &[("error", &e)]);
        }
        standard
            .reconcile_duration
            .observe_duration(started.elapsed());
        select! {
            recv(wake_rx) -> _ => {}
            recv(ticker) -> _ => {}
            recv(stop) -> _ => break Ok(()),
            recv(lost_rx) -> _ => break Err(Error::LostLead),
        }
    };

    // No sweep runs now, so no write of one is in flight. Flush the
    // Events, then release the Lease after the last write.
    let Sweeper {
        watches, recorder, ..
    } = sweeper;
    watches.stop();
    let flushed = recorder.shutdown(Duration::from_secs(5));
    if flushed.abandoned == 0 {
        elector.shutdown();
        log::info("stopped; released the leader Lease", &[]);
    } else {
        log::warn(
            "the Events did not flush in time; leaving the Lease to expire",
            &[("abandoned", &flushed.abandoned)],
        );
        elector.abandon();
    }
    outcome
}
