//! Sending requests: one ureq agent with rustls, the credentials, the
//! leader guard, timeouts and body caps.
//!
//! ureq is told not to turn 4xx/5xx into its own errors, so the body of a
//! failure (a Kubernetes `Status`) is read and its message kept in the
//! typed [`Error`]. Every body is read through a cap: ureq's readers have
//! no limit of their own, and a server (or something pretending to be
//! one) must not be able to make an operator allocate without bound.
//!
//! Writes pass the [`WriteGuard`] first when one is set: an operator that
//! lost its leader Lease gets `Error::NotLeader` instead of a write that
//! races the new leader. Reads are never guarded.
//!
//! Every request carries a User-Agent naming the binary, and every
//! create, replace and patch a `fieldManager` of the same name, so the
//! apiserver's audit log and each object's managedFields say which
//! program wrote what ([`Client::identify`]; the default is the
//! executable's name, as client-go's `DefaultKubernetesUserAgent` in
//! rest/config.go does).
//!
//! Retries follow client-go's rest client ([`crate::retry`]): 429 and 5xx
//! answers with `Retry-After` are repeated after the wait the server
//! asks, broken connections only for GET.
//!
//! With [`Client::with_metrics`] each request is counted and timed in
//! client-go's families (`rest_client_requests_total{code,host,method}`,
//! `rest_client_request_duration_seconds{host,verb}`, from
//! k8s.io/component-base/metrics/prometheus/restclient/metrics.go), so a
//! dashboard built for a Go controller reads a liken operator too.

use std::io::Read;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};

use crate::config::{Auth, Config, ConfigError};
use crate::error::{Error, decide_error, parse_retry_after};
use crate::metrics::Registry;
use crate::object::{DynamicObject, Object, ObjectList, decode_list};
use crate::request::{Api, DeleteParams, ListParams, Method, NODES, PatchOp, Request};
use crate::retry::{RetryPolicy, decide_retry};

/// Decides whether this process may write now. The leader elector
/// implements it; the client asks before every write.
pub trait WriteGuard: Send + Sync {
    /// True while writes are allowed.
    fn may_write(&self) -> bool;
}

/// How much of an answer the client reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest success body (a LIST page of many objects).
    pub body: u64,
    /// The largest failure body kept for its Status message.
    pub error_body: u64,
    /// The longest line of a watch stream (one event).
    pub watch_line: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        // etcd refuses objects over 1.5 MiB, so a 16 MiB event line is
        // generous; 256 MiB holds an unpaged LIST of tens of thousands of
        // Machines.
        Limits {
            body: 256 << 20,
            error_body: 1 << 20,
            watch_line: 16 << 20,
        }
    }
}

/// A token read from a file and re-read after a minute, because the
/// kubelet rotates projected service-account tokens. As client-go's
/// cachingTokenSource and tokenSourceTransport do
/// (transport/token_source.go): a re-read that fails keeps the token in
/// hand (the kubelet swaps the file by renaming, so a read can miss it)
/// and is tried again on the next request; an empty file is no token; and
/// a 401 makes the next request re-read the file at once.
struct TokenFile {
    path: PathBuf,
    refresh: Duration,
    cached: Mutex<CachedToken>,
}

#[derive(Default)]
struct CachedToken {
    token: Option<String>,
    /// When `token` was read; `None` makes the next request re-read.
    read_at: Option<Instant>,
}

impl TokenFile {
    const REFRESH: Duration = Duration::from_secs(60);

    fn new(path: PathBuf) -> TokenFile {
        TokenFile {
            path,
            refresh: TokenFile::REFRESH,
            cached: Mutex::new(CachedToken::default()),
        }
    }

    fn get(&self, what: &str) -> Result<String, Error> {
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if let (Some(token), Some(at)) = (&cached.token, cached.read_at)
            && at.elapsed() < self.refresh
        {
            return Ok(token.clone());
        }
        let read = std::fs::read_to_string(&self.path)
            .map_err(|e| e.to_string())
            .map(|t| t.trim().to_owned())
            .and_then(|t| {
                if t.is_empty() {
                    Err("the file is empty".to_owned())
                } else {
                    Ok(t)
                }
            });
        match (read, &cached.token) {
            (Ok(token), _) => {
                cached.token = Some(token.clone());
                cached.read_at = Some(Instant::now());
                Ok(token)
            }
            // Keep the token in hand; read_at stays old, so the next
            // request tries the file again.
            (Err(_), Some(old)) => Ok(old.clone()),
            (Err(e), None) => Err(Error::Transport {
                what: what.to_owned(),
                message: format!(
                    "reading the service-account token {}: {e}; check that the pod mounts its token",
                    self.path.display()
                ),
            }),
        }
    }

    /// Makes the next request re-read the file.
    fn invalidate(&self) {
        self.cached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .read_at = None;
    }
}

enum Bearer {
    None,
    Fixed(String),
    File(TokenFile),
}

struct Inner {
    agent: ureq::Agent,
    server: String,
    /// Shared with detached clients, so a re-read token serves them all.
    bearer: Arc<Bearer>,
    timeout: Duration,
    limits: Limits,
}

/// Why one attempt got no answer.
enum CallError {
    /// The request could not be built; nothing was sent.
    Built(Error),
    /// No answer arrived.
    Transport(ureq::Error),
}

/// Whether a transport failure is a connection that was reset or cut
/// short, which a GET may retry (client-go's `IsConnectionReset` and
/// `IsProbableEOF`), rather than one that never opened or timed out.
fn is_transient(e: &CallError) -> bool {
    use std::io::ErrorKind;
    match e {
        CallError::Transport(ureq::Error::Io(io)) => matches!(
            io.kind(),
            ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::UnexpectedEof
                | ErrorKind::BrokenPipe
        ),
        _ => false,
    }
}

/// Who the client says it is: the User-Agent of every request and the
/// fieldManager of every write.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Identity {
    user_agent: String,
    field_manager: String,
}

impl Identity {
    /// The apiserver refuses a fieldManager longer than this
    /// (apimachinery's ValidateFieldManager).
    const FIELD_MANAGER_MAX: usize = 128;

    fn new(name: &str, version: &str) -> Identity {
        let name: String = name
            .chars()
            .filter(|c| c.is_ascii_graphic() && *c != '/')
            .take(Identity::FIELD_MANAGER_MAX)
            .collect();
        let name = if name.is_empty() {
            "liken-kube".to_owned()
        } else {
            name
        };
        Identity {
            user_agent: format!(
                "{name}/{version} ({}/{}) liken-kube/{}",
                std::env::consts::OS,
                std::env::consts::ARCH,
                env!("CARGO_PKG_VERSION")
            ),
            field_manager: name,
        }
    }

    /// The executable's file name, as client-go takes `os.Args[0]`.
    fn of_this_process() -> Identity {
        let name = std::env::args_os()
            .next()
            .map(PathBuf::from)
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default();
        Identity::new(&name, env!("CARGO_PKG_VERSION"))
    }
}

/// The series a request is counted in.
struct RestMetrics {
    registry: Registry,
    host: String,
}

impl RestMetrics {
    /// client-go's buckets for request latency.
    const BUCKETS: &'static [f64] = &[
        0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
    ];

    fn observe(&self, method: Method, code: Option<u16>, took: Duration) {
        let code = code.map_or_else(|| "<error>".to_owned(), |c| c.to_string());
        self.registry
            .counter(
                "rest_client_requests_total",
                "Number of HTTP requests, partitioned by status code, method, and host.",
                &[
                    ("code", &code),
                    ("host", &self.host),
                    ("method", method.as_str()),
                ],
            )
            .inc();
        self.registry
            .histogram(
                "rest_client_request_duration_seconds",
                "Request latency in seconds, until the response head. Broken down by verb, and host.",
                &[("host", &self.host), ("verb", method.as_str())],
                RestMetrics::BUCKETS,
            )
            .observe_duration(took);
    }

    fn retried(&self, method: Method, code: Option<u16>) {
        let code = code.map_or_else(|| "<error>".to_owned(), |c| c.to_string());
        self.registry
            .counter(
                "rest_client_request_retries_total",
                "Number of request retries, partitioned by status code, verb, and host.",
                &[
                    ("code", &code),
                    ("host", &self.host),
                    ("verb", method.as_str()),
                ],
            )
            .inc();
    }
}

/// A client for one API server. Cheap to clone; clones share the
/// connection pool.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    guard: Option<Arc<dyn WriteGuard>>,
    identity: Arc<Identity>,
    metrics: Option<Arc<RestMetrics>>,
    retries: RetryPolicy,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.inner.server)
            .field("guarded", &self.guard.is_some())
            .finish()
    }
}

impl Client {
    /// A client for `config`. Fails when the CA or client key cannot be
    /// parsed.
    pub fn new(config: &Config) -> Result<Client, ConfigError> {
        Client::with_limits(config, Limits::default())
    }

    /// As [`Client::new`] with other body caps.
    pub fn with_limits(config: &Config, limits: Limits) -> Result<Client, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            origin: config.origin.clone(),
            message,
        };
        crate::config::decide_plain_http(&config.server, &config.auth).map_err(invalid)?;
        let mut tls = TlsConfig::builder();
        if let Some(ca) = &config.ca_pem {
            let certs: Vec<Certificate<'static>> = ureq::tls::parse_pem(ca)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c)),
                    Ok(_) => None,
                    Err(e) => Some(Err(e)),
                })
                .collect::<Result<_, _>>()
                .map_err(|e| invalid(format!("the CA is not valid PEM: {e}")))?;
            if certs.is_empty() {
                return Err(invalid("the CA bundle holds no certificate".into()));
            }
            tls = tls.root_certs(RootCerts::new_with_certs(&certs));
        }
        let mut bearer = Bearer::None;
        match &config.auth {
            Auth::None => {}
            Auth::Token(t) => bearer = Bearer::Fixed(t.trim().to_owned()),
            Auth::TokenFile(path) => bearer = Bearer::File(TokenFile::new(path.clone())),
            Auth::ClientCert { cert_pem, key_pem } => {
                let chain: Vec<Certificate<'static>> = ureq::tls::parse_pem(cert_pem)
                    .filter_map(|item| match item {
                        Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c)),
                        Ok(_) => None,
                        Err(e) => Some(Err(e)),
                    })
                    .collect::<Result<_, _>>()
                    .map_err(|e| {
                        invalid(format!("the client certificate is not valid PEM: {e}"))
                    })?;
                if chain.is_empty() {
                    return Err(invalid(
                        "the client certificate PEM holds no certificate".into(),
                    ));
                }
                let key = PrivateKey::from_pem(key_pem).map_err(|e| {
                    invalid(format!("the client key is not a PEM private key: {e}"))
                })?;
                tls = tls.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
            }
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .tls_config(tls.build())
            .http_status_as_error(false)
            .timeout_global(Some(config.timeout))
            // Set per request from the identity instead.
            .user_agent(ureq::config::AutoHeaderValue::None)
            .accept("application/json")
            .max_redirects(0)
            .build()
            .into();
        Ok(Client {
            inner: Arc::new(Inner {
                agent,
                server: config.server.clone(),
                bearer: Arc::new(bearer),
                timeout: config.timeout,
                limits,
            }),
            guard: None,
            identity: Arc::new(Identity::of_this_process()),
            metrics: None,
            retries: RetryPolicy::default(),
        })
    }

    /// The same client, with writes refused while `guard` says no.
    pub fn with_write_guard(&self, guard: Arc<dyn WriteGuard>) -> Client {
        Client {
            guard: Some(guard),
            ..self.clone()
        }
    }

    /// The same client without a write guard (the elector's own writes to
    /// its Lease must not wait on the election).
    pub fn unguarded(&self) -> Client {
        Client {
            guard: None,
            ..self.clone()
        }
    }

    /// The same client identifying as the program `name` at `version`:
    /// User-Agent `name/version (linux/x86_64) liken-kube/<v>` on every
    /// request and `fieldManager=name` on every create, replace and patch
    /// (an apply's manager too). Characters a field manager cannot hold
    /// (spaces, `/`, control characters) are dropped and the name is cut
    /// at 128. Without this the name is the executable's.
    pub fn identify(&self, name: &str, version: &str) -> Client {
        Client {
            identity: Arc::new(Identity::new(name, version)),
            ..self.clone()
        }
    }

    /// The same client retrying by `policy` instead of client-go's ten
    /// retries (see [`crate::retry`]).
    pub fn with_retries(&self, policy: RetryPolicy) -> Client {
        Client {
            retries: policy,
            ..self.clone()
        }
    }

    /// The User-Agent this client sends.
    pub fn user_agent(&self) -> &str {
        &self.identity.user_agent
    }

    /// The fieldManager this client's writes name.
    pub fn field_manager(&self) -> &str {
        &self.identity.field_manager
    }

    /// The same client, counting and timing every request in `registry`
    /// (`rest_client_requests_total`, `rest_client_request_duration_seconds`).
    pub fn with_metrics(&self, registry: &Registry) -> Client {
        let host = self
            .inner
            .server
            .split_once("://")
            .map_or(self.inner.server.as_str(), |(_, h)| h)
            .to_owned();
        Client {
            metrics: Some(Arc::new(RestMetrics {
                registry: registry.clone(),
                host,
            })),
            ..self.clone()
        }
    }

    /// The same client on a connection pool of its own, so that
    /// [`Client::interrupt`] ends only its own requests (a watcher's).
    pub(crate) fn detached(&self) -> Client {
        let agent = ureq::Agent::new_with_config(self.inner.agent.config().clone());
        Client {
            inner: Arc::new(Inner {
                agent,
                server: self.inner.server.clone(),
                bearer: self.inner.bearer.clone(),
                timeout: self.inner.timeout,
                limits: self.inner.limits,
            }),
            ..self.clone()
        }
    }

    /// Closes every connection of this client's pool, so a request
    /// blocked reading (a watch stream) returns at once with a Transport
    /// error; later requests fail the same way. For a [`Client::detached`]
    /// client only (ureq's `Agent::shutdown`).
    pub(crate) fn interrupt(&self) {
        self.inner.agent.clone().shutdown();
    }

    /// The server URL.
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// The body caps.
    pub fn limits(&self) -> Limits {
        self.inner.limits
    }

    fn check_guard(&self, req: &Request) -> Result<(), Error> {
        if req.method.is_write()
            && let Some(g) = &self.guard
            && !g.may_write()
        {
            return Err(Error::NotLeader { what: req.what() });
        }
        Ok(())
    }

    /// The bearer token to send now, if the client has one.
    fn token(&self, what: &str) -> Result<Option<String>, Error> {
        match self.inner.bearer.as_ref() {
            Bearer::None => Ok(None),
            Bearer::Fixed(t) => Ok(Some(t.clone())),
            Bearer::File(f) => f.get(what).map(Some),
        }
    }

    /// Sends `req` until it succeeds or fails for good: the guard first,
    /// then retries as [`crate::retry::decide_retry`] says, and one
    /// immediate retry when a 401 came with a token file that has changed
    /// since. Returns the success response, body not yet read.
    fn respond(
        &self,
        req: &Request,
        timeout: Duration,
        per_read: Option<Duration>,
    ) -> Result<ureq::http::Response<ureq::Body>, Error> {
        let what = req.what();
        let started = Instant::now();
        let mut retries = 0;
        let mut reauthenticated = false;
        loop {
            // Asked before every attempt: a retry must not outlive the
            // leader's term.
            self.check_guard(req)?;
            let token = self.token(&what)?;
            let left = timeout.saturating_sub(started.elapsed());
            let (error, transient) = match self.call(req, left, per_read, token.as_deref()) {
                Ok(resp) if resp.status().is_success() => return Ok(resp),
                Ok(resp) => {
                    let error = self.failure(&what, resp);
                    if let (Error::Unauthorized { .. }, Bearer::File(f)) =
                        (&error, self.inner.bearer.as_ref())
                    {
                        f.invalidate();
                        if !reauthenticated && f.get(&what).ok() != token {
                            reauthenticated = true;
                            continue;
                        }
                    }
                    (error, false)
                }
                Err(e) => {
                    let transient = is_transient(&e);
                    let error = match e {
                        CallError::Built(e) => return Err(e),
                        CallError::Transport(e) => Error::Transport {
                            what: what.clone(),
                            message: e.to_string(),
                        },
                    };
                    (error, transient)
                }
            };
            let left = timeout.saturating_sub(started.elapsed());
            match decide_retry(&error, transient, req.method, retries, left, &self.retries) {
                Some(wait) => {
                    retries += 1;
                    if let Some(m) = &self.metrics {
                        m.retried(req.method, error.code());
                    }
                    std::thread::sleep(wait);
                }
                None => return Err(error),
            }
        }
    }

    /// One attempt: sends `req` with `token` and returns the answer,
    /// whatever its status.
    fn call(
        &self,
        req: &Request,
        timeout: Duration,
        per_read: Option<Duration>,
        token: Option<&str>,
    ) -> Result<ureq::http::Response<ureq::Body>, CallError> {
        let uri = if req.takes_field_manager() {
            req.clone()
                .with_field_manager(&self.identity.field_manager)
                .uri()
        } else {
            req.uri()
        };
        let url = format!("{}{uri}", self.inner.server);
        let mut builder = ureq::http::Request::builder()
            .method(req.method.as_str())
            .uri(&url)
            .header("User-Agent", &self.identity.user_agent);
        if let Some(t) = token {
            builder = builder.header("Authorization", format!("Bearer {t}"));
        }
        if let Some(ct) = req.content_type {
            builder = builder.header("Content-Type", ct);
        }
        let built = |e: ureq::http::Error| {
            CallError::Built(Error::InvalidRequest {
                message: format!("{}: {e}", req.what()),
            })
        };
        let agent = &self.inner.agent;
        let started = Instant::now();
        let result = match &req.body {
            Some(body) => {
                let r = builder.body(body.clone()).map_err(built)?;
                let r = agent
                    .configure_request(r)
                    .timeout_global(Some(timeout))
                    .timeout_per_read(per_read)
                    .build();
                agent.run(r)
            }
            None => {
                let r = builder.body(()).map_err(built)?;
                let r = agent
                    .configure_request(r)
                    .timeout_global(Some(timeout))
                    .timeout_per_read(per_read)
                    .build();
                agent.run(r)
            }
        };
        if let Some(m) = &self.metrics {
            let code = result.as_ref().ok().map(|r| r.status().as_u16());
            m.observe(req.method, code, started.elapsed());
        }
        result.map_err(CallError::Transport)
    }

    /// The typed error for a failed answer: its Status body (read up to
    /// the error cap) and its `Retry-After`.
    fn failure(&self, what: &str, resp: ureq::http::Response<ureq::Body>) -> Error {
        let code = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        // The Status body is only for the message; a cut-off one is
        // still worth its first megabyte.
        let mut buf = Vec::new();
        let _ = resp
            .into_body()
            .into_with_config()
            .limit(u64::MAX)
            .reader()
            .take(self.inner.limits.error_body)
            .read_to_end(&mut buf);
        decide_error(what, code, &buf, retry_after)
    }

    fn read_capped(&self, what: &str, body: ureq::Body, limit: u64) -> Result<Vec<u8>, Error> {
        match body.into_with_config().limit(limit).read_to_vec() {
            Ok(v) => Ok(v),
            Err(ureq::Error::BodyExceedsLimit(_)) => Err(Error::TooLarge {
                what: what.to_owned(),
                limit,
            }),
            Err(e) => Err(Error::Transport {
                what: what.to_owned(),
                message: e.to_string(),
            }),
        }
    }

    /// Sends a request and returns the success body, or the typed error.
    /// This is the raw form the typed methods build on; tests use it to
    /// send bodies liken's types would never produce.
    pub fn send(&self, req: &Request) -> Result<Vec<u8>, Error> {
        let timeout = req.timeout.unwrap_or(self.inner.timeout);
        let resp = self.respond(req, timeout, None)?;
        self.read_capped(&req.what(), resp.into_body(), self.inner.limits.body)
    }

    /// Opens a streaming request (a watch) whose timeout is `timeout` and
    /// each read's `per_read`; returns the body reader on success.
    pub(crate) fn open_stream(
        &self,
        req: &Request,
        timeout: Duration,
        per_read: Duration,
    ) -> Result<ureq::BodyReader<'static>, Error> {
        let resp = self.respond(req, timeout, Some(per_read))?;
        Ok(resp.into_body().into_with_config().limit(u64::MAX).reader())
    }

    /// Sends `req` and decodes the answer as a `T`.
    fn fetch<T: Object>(&self, req: Request) -> Result<T, Error> {
        let bytes = self.send(&req)?;
        Client::decode(&req, &bytes)
    }

    fn decode<T: Object>(req: &Request, bytes: &[u8]) -> Result<T, Error> {
        T::decode(bytes, &req.what()).map_err(|message| Error::Decode {
            what: req.what(),
            message,
        })
    }

    fn json<B: Serialize + ?Sized>(body: &B) -> Result<Vec<u8>, Error> {
        serde_json::to_vec(body).map_err(|e| Error::InvalidRequest {
            message: format!("the body does not serialize: {e}"),
        })
    }

    /// GET one object.
    pub fn get<T: Object>(&self, api: &Api, name: &str) -> Result<T, Error> {
        self.fetch(api.get(name)?)
    }

    /// GET one object, `None` when it does not exist.
    pub fn get_opt<T: Object>(&self, api: &Api, name: &str) -> Result<Option<T>, Error> {
        match self.get(api, name) {
            Ok(o) => Ok(Some(o)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// One page of a LIST.
    pub fn list<T: Object>(&self, api: &Api, params: &ListParams) -> Result<ObjectList<T>, Error> {
        let req = api.list(params);
        let bytes = self.send(&req)?;
        decode_list(&bytes, &req.what()).map_err(|message| Error::Decode {
            what: req.what(),
            message,
        })
    }

    /// Every page of a LIST, following continue tokens. The
    /// resourceVersion is the first page's, which is the snapshot every
    /// page is read from. An expired token is `Error::Gone`: list again.
    pub fn list_all<T: Object>(
        &self,
        api: &Api,
        params: &ListParams,
    ) -> Result<ObjectList<T>, Error> {
        let mut params = params.clone();
        let mut first = self.list::<T>(api, &params)?;
        let mut next = first.continue_token.take();
        while let Some(token) = next {
            params.continue_token = Some(token);
            let page = self.list::<T>(api, &params)?;
            first.items.extend(page.items);
            first.skipped.extend(page.skipped);
            next = page.continue_token;
        }
        Ok(first)
    }

    /// POST a new object; returns it as stored.
    pub fn create<T: Object, B: Serialize + ?Sized>(
        &self,
        api: &Api,
        body: &B,
    ) -> Result<T, Error> {
        self.fetch(api.create(Client::json(body)?)?)
    }

    /// PUT a whole object. Its metadata.resourceVersion, when set, makes
    /// the write fail with Conflict if the object changed since.
    pub fn replace<T: Object, B: Serialize + ?Sized>(
        &self,
        api: &Api,
        name: &str,
        body: &B,
    ) -> Result<T, Error> {
        self.fetch(api.replace(name, Client::json(body)?)?)
    }

    /// PUT the status subresource.
    pub fn replace_status<T: Object, B: Serialize + ?Sized>(
        &self,
        api: &Api,
        name: &str,
        body: &B,
    ) -> Result<T, Error> {
        self.fetch(api.replace_status(name, Client::json(body)?)?)
    }

    /// PATCH with a JSON merge patch.
    pub fn merge_patch<T: Object>(
        &self,
        api: &Api,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<T, Error> {
        self.fetch(api.merge_patch(name, Client::json(patch)?)?)
    }

    /// PATCH the status subresource with a JSON merge patch.
    pub fn merge_patch_status<T: Object>(
        &self,
        api: &Api,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<T, Error> {
        self.fetch(api.merge_patch_status(name, Client::json(patch)?)?)
    }

    /// PATCH with a JSON patch; a failing `test` operation refuses the
    /// whole patch: `Error::Other` with code 422 and reason `Invalid` (the
    /// apiserver does not say which operation failed).
    pub fn json_patch<T: Object>(
        &self,
        api: &Api,
        name: &str,
        ops: &[PatchOp],
    ) -> Result<T, Error> {
        self.fetch(api.json_patch(name, Client::json(ops)?)?)
    }

    /// PATCH the status subresource with a JSON patch.
    pub fn json_patch_status<T: Object>(
        &self,
        api: &Api,
        name: &str,
        ops: &[PatchOp],
    ) -> Result<T, Error> {
        self.fetch(api.json_patch_status(name, Client::json(ops)?)?)
    }

    /// Server-side apply of `config` (the fields this program owns, with
    /// apiVersion, kind and metadata.name) as this client's field manager.
    /// Creates the object if absent. A field another manager owns with a
    /// different value is `Error::Conflict` unless `force`.
    pub fn apply<T: Object, B: Serialize + ?Sized>(
        &self,
        api: &Api,
        name: &str,
        config: &B,
        force: bool,
    ) -> Result<T, Error> {
        self.fetch(api.apply(
            name,
            Client::json(config)?,
            &self.identity.field_manager,
            force,
        )?)
    }

    /// Server-side apply on the status subresource.
    pub fn apply_status<T: Object, B: Serialize + ?Sized>(
        &self,
        api: &Api,
        name: &str,
        config: &B,
        force: bool,
    ) -> Result<T, Error> {
        self.fetch(api.apply_status(
            name,
            Client::json(config)?,
            &self.identity.field_manager,
            force,
        )?)
    }

    /// DELETE one object. The answer (the object with a deletion
    /// timestamp, or a Status) is not decoded.
    pub fn delete(&self, api: &Api, name: &str, params: &DeleteParams) -> Result<(), Error> {
        let req = api.delete(name, params)?;
        self.send(&req).map(|_| ())
    }

    /// Evicts the pod `name` (`api` is [`crate::request::PODS`] in its
    /// namespace) through the policy/v1 Eviction subresource, which
    /// honours PodDisruptionBudgets. A budget's refusal is
    /// `Error::DisruptionBudget`, told apart from throttling
    /// (`Error::TooManyRequests`) and every other failure; a pod already
    /// gone is `Error::NotFound`.
    pub fn evict(&self, api: &Api, name: &str, params: &DeleteParams) -> Result<(), Error> {
        let req = api.evict(name, params)?;
        self.send(&req).map(|_| ())
    }

    /// Marks the Node `name` unschedulable (`kubectl cordon`): new pods
    /// are not placed on it, running ones stay.
    pub fn cordon(&self, name: &str) -> Result<DynamicObject, Error> {
        let patch = serde_json::json!({"spec": {"unschedulable": true}});
        self.merge_patch(&Api::all(NODES), name, &patch)
    }

    /// Makes the Node `name` schedulable again (`kubectl uncordon`).
    pub fn uncordon(&self, name: &str) -> Result<DynamicObject, Error> {
        let patch = serde_json::json!({"spec": {"unschedulable": null}});
        self.merge_patch(&Api::all(NODES), name, &patch)
    }

    /// Sets metadata.finalizers of `name` to `finalizers`, only if the
    /// object is still at `resource_version` (else `Error::Conflict`).
    pub fn set_finalizers(
        &self,
        api: &Api,
        name: &str,
        resource_version: &str,
        finalizers: &[String],
    ) -> Result<DynamicObject, Error> {
        if resource_version.is_empty() {
            return Err(Error::InvalidRequest {
                message: format!(
                    "setting the finalizers of {name} needs the resourceVersion they were read at"
                ),
            });
        }
        // A resourceVersion in a merge patch is a precondition: the
        // apiserver refuses the patch with 409 if the object moved on.
        let patch = serde_json::json!({"metadata": {
            "resourceVersion": resource_version,
            "finalizers": finalizers,
        }});
        self.merge_patch(api, name, &patch)
    }

    /// Adds `finalizer` to `name` unless it is there: reads the object,
    /// then writes the new list guarded by the resourceVersion read. True
    /// when it wrote. A concurrent writer makes this `Error::Conflict`;
    /// retry with [`crate::retry::retry_on_conflict`].
    pub fn add_finalizer(&self, api: &Api, name: &str, finalizer: &str) -> Result<bool, Error> {
        self.change_finalizers(api, name, finalizer, true)
    }

    /// Removes `finalizer` from `name` if it is there, guarded like
    /// [`Client::add_finalizer`]. An object already gone is `Ok(false)`:
    /// removing the last finalizer of a deleted object lets it go, and a
    /// retry must not fail because it went.
    pub fn remove_finalizer(&self, api: &Api, name: &str, finalizer: &str) -> Result<bool, Error> {
        match self.change_finalizers(api, name, finalizer, false) {
            Err(e) if e.is_not_found() => Ok(false),
            other => other,
        }
    }

    fn change_finalizers(
        &self,
        api: &Api,
        name: &str,
        finalizer: &str,
        add: bool,
    ) -> Result<bool, Error> {
        let current: DynamicObject = self.get(api, name)?;
        let list = current.finalizers();
        match decide_finalizers(&list, finalizer, add) {
            None => Ok(false),
            Some(next) => {
                self.set_finalizers(api, name, current.resource_version(), &next)?;
                Ok(true)
            }
        }
    }

    /// Whether a request of this method would be refused by the guard now.
    pub fn may_write(&self) -> bool {
        self.guard.as_ref().is_none_or(|g| g.may_write())
    }

    /// The method set of writes, for callers that check before building.
    pub fn is_guarded(&self, method: Method) -> bool {
        method.is_write() && self.guard.is_some()
    }
}

/// The finalizer list after adding (`add`) or removing `finalizer` from
/// `current`, or `None` when nothing changes. Order is kept; an added
/// finalizer goes last.
pub fn decide_finalizers(current: &[String], finalizer: &str, add: bool) -> Option<Vec<String>> {
    let present = current.iter().any(|f| f == finalizer);
    match (add, present) {
        (true, true) | (false, false) => None,
        (true, false) => {
            let mut next = current.to_vec();
            next.push(finalizer.to_owned());
            Some(next)
        }
        (false, true) => Some(
            current
                .iter()
                .filter(|f| *f != finalizer)
                .cloned()
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::MACHINES;
    use std::sync::atomic::{AtomicBool, Ordering};

    struct Flag(AtomicBool);
    impl WriteGuard for Flag {
        fn may_write(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }

    fn client() -> Client {
        // Port 9 on loopback: nothing listens, so a request that gets past
        // the guard fails as Transport, which tells the two apart.
        let config = Config {
            server: "http://127.0.0.1:9".into(),
            ca_pem: None,
            auth: Auth::Token("t".into()),
            namespace: "default".into(),
            timeout: Duration::from_secs(2),
            origin: "test".into(),
        };
        Client::new(&config).unwrap()
    }

    #[test]
    fn the_guard_refuses_writes_before_sending() {
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let c = client().with_write_guard(flag.clone());
        let api = Api::all(MACHINES);
        let e = c.send(&api.create(b"{}".to_vec()).unwrap()).unwrap_err();
        assert_eq!(
            e,
            Error::NotLeader {
                what: "POST /apis/liken.sh/v1alpha1/machines".into()
            }
        );
        assert!(!c.may_write());
        // Reads are not guarded: this one reaches the (absent) server.
        let e = c.send(&api.get("a").unwrap()).unwrap_err();
        assert!(matches!(e, Error::Transport { .. }), "{e:?}");
        flag.0.store(true, Ordering::SeqCst);
        let e = c.send(&api.create(b"{}".to_vec()).unwrap()).unwrap_err();
        assert!(matches!(e, Error::Transport { .. }), "{e:?}");
        assert!(c.unguarded().may_write());
    }

    #[test]
    fn bad_pem_is_a_config_error() {
        let mut config = Config {
            server: "https://127.0.0.1:1".into(),
            ca_pem: Some(b"not pem".to_vec()),
            auth: Auth::None,
            namespace: "default".into(),
            timeout: Duration::from_secs(1),
            origin: "kc".into(),
        };
        let e = Client::new(&config).unwrap_err();
        assert!(
            e.to_string().contains("CA bundle holds no certificate"),
            "{e}"
        );
        config.ca_pem = None;
        config.auth = Auth::ClientCert {
            cert_pem: b"x".to_vec(),
            key_pem: b"y".to_vec(),
        };
        assert!(Client::new(&config).is_err());
    }

    #[test]
    fn identity_names_the_program() {
        let c = client();
        // The default is the executable's name (this test binary's).
        assert!(c.user_agent().starts_with(c.field_manager()));
        assert!(!c.field_manager().is_empty());
        let c = c.identify("liken-machine-operator", "2026.07.01-001");
        assert_eq!(c.field_manager(), "liken-machine-operator");
        assert_eq!(
            c.user_agent(),
            format!(
                "liken-machine-operator/2026.07.01-001 ({}/{}) liken-kube/{}",
                std::env::consts::OS,
                std::env::consts::ARCH,
                env!("CARGO_PKG_VERSION")
            )
        );
        // What a field manager cannot hold is dropped, and it is cut at 128.
        let c = c.identify("my op/\u{7}x", "1");
        assert_eq!(c.field_manager(), "myopx");
        let c = c.identify(&"a".repeat(300), "1");
        assert_eq!(c.field_manager().len(), 128);
        assert_eq!(c.identify(" ", "1").field_manager(), "liken-kube");
    }

    #[test]
    fn the_finalizer_table() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        type Case<'a> = (&'a [&'a str], &'a str, bool, Option<Vec<String>>);
        let cases: [Case; 6] = [
            (&[], "liken.sh/drain", true, Some(v(&["liken.sh/drain"]))),
            (
                &["a"],
                "liken.sh/drain",
                true,
                Some(v(&["a", "liken.sh/drain"])),
            ),
            (&["liken.sh/drain"], "liken.sh/drain", true, None),
            (&[], "liken.sh/drain", false, None),
            (
                &["a", "liken.sh/drain", "b"],
                "liken.sh/drain",
                false,
                Some(v(&["a", "b"])),
            ),
            (&["liken.sh/drain"], "liken.sh/drain", false, Some(vec![])),
        ];
        for (current, f, add, want) in cases {
            assert_eq!(
                decide_finalizers(&v(current), f, add),
                want,
                "{current:?} {} {f}",
                if add { "+" } else { "-" }
            );
        }
    }

    #[test]
    fn a_token_file_keeps_its_token_through_a_bad_read() {
        let dir = std::env::temp_dir().join(format!("liken-kube-tokenfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        let mut f = TokenFile::new(path.clone());
        f.refresh = Duration::ZERO;
        // No file and nothing in hand: a clear error.
        let e = f.get("GET /x").unwrap_err();
        assert!(e.to_string().contains("mounts its token"), "{e}");
        std::fs::write(&path, "first\n").unwrap();
        assert_eq!(f.get("GET /x").unwrap(), "first");
        // The kubelet is swapping the file: missing, then empty.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(f.get("GET /x").unwrap(), "first");
        std::fs::write(&path, " \n").unwrap();
        assert_eq!(f.get("GET /x").unwrap(), "first");
        std::fs::write(&path, "second").unwrap();
        assert_eq!(f.get("GET /x").unwrap(), "second");
        // Within the refresh the file is not read again, unless a 401
        // invalidated it.
        f.refresh = Duration::from_secs(60);
        std::fs::write(&path, "third").unwrap();
        assert_eq!(f.get("GET /x").unwrap(), "second");
        f.invalidate();
        assert_eq!(f.get("GET /x").unwrap(), "third");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn client_of(server: &str) -> Client {
        Client::new(&Config {
            server: server.to_owned(),
            ca_pem: None,
            auth: Auth::None,
            namespace: "default".into(),
            timeout: Duration::from_secs(10),
            origin: "test".into(),
        })
        .unwrap()
    }

    #[test]
    fn a_429_with_retry_after_is_waited_out_and_repeated() {
        let throttled = "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        let ok = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 36\r\nConnection: close\r\n\r\n{\"metadata\":{\"resourceVersion\":\"5\"}}";
        let (server, seen) = crate::fake_server::serve(vec![throttled, ok], false);
        let registry = Registry::new();
        let c = client_of(&server).with_metrics(&registry);
        let list = c
            .list::<DynamicObject>(&Api::all(MACHINES), &ListParams::default())
            .unwrap();
        assert_eq!(list.resource_version, "5");
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2);
        let waited = seen[1] - seen[0];
        assert!(waited >= Duration::from_millis(950), "{waited:?}");
        let host = server.trim_start_matches("http://");
        assert!(
            registry.render().contains(&format!(
                "rest_client_request_retries_total{{code=\"429\",host=\"{host}\",verb=\"GET\"}} 1"
            )),
            "{}",
            registry.render()
        );
    }

    #[test]
    fn a_429_without_retry_after_is_the_callers() {
        let throttled = "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        let (server, seen) = crate::fake_server::serve(vec![throttled], false);
        let e = client_of(&server)
            .list::<DynamicObject>(&Api::all(MACHINES), &ListParams::default())
            .unwrap_err();
        assert!(e.is_too_many_requests(), "{e:?}");
        assert_eq!(seen.lock().unwrap().len(), 1);
    }
}
