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

use std::io::Read;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};

use crate::config::{Auth, Config, ConfigError};
use crate::error::{Error, decide_error};
use crate::object::{Object, ObjectList, decode_list};
use crate::request::{Api, DeleteParams, ListParams, Method, Request};

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
/// kubelet rotates projected service-account tokens.
struct TokenFile {
    path: PathBuf,
    cached: Mutex<Option<(String, Instant)>>,
}

impl TokenFile {
    const REFRESH: Duration = Duration::from_secs(60);

    fn get(&self, what: &str) -> Result<String, Error> {
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((token, at)) = cached.as_ref()
            && at.elapsed() < TokenFile::REFRESH
        {
            return Ok(token.clone());
        }
        let token = std::fs::read_to_string(&self.path)
            .map_err(|e| Error::Transport {
                what: what.to_owned(),
                message: format!("reading the token {}: {e}", self.path.display()),
            })?
            .trim()
            .to_owned();
        *cached = Some((token.clone(), Instant::now()));
        Ok(token)
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
    bearer: Bearer,
    timeout: Duration,
    limits: Limits,
}

/// A client for one API server. Cheap to clone; clones share the
/// connection pool.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    guard: Option<Arc<dyn WriteGuard>>,
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
            Auth::TokenFile(path) => {
                bearer = Bearer::File(TokenFile {
                    path: path.clone(),
                    cached: Mutex::new(None),
                });
            }
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
            .user_agent(concat!("liken-kube/", env!("CARGO_PKG_VERSION")))
            .accept("application/json")
            .max_redirects(0)
            .build()
            .into();
        Ok(Client {
            inner: Arc::new(Inner {
                agent,
                server: config.server.clone(),
                bearer,
                timeout: config.timeout,
                limits,
            }),
            guard: None,
        })
    }

    /// The same client, with writes refused while `guard` says no.
    pub fn with_write_guard(&self, guard: Arc<dyn WriteGuard>) -> Client {
        Client {
            inner: self.inner.clone(),
            guard: Some(guard),
        }
    }

    /// The same client without a write guard (the elector's own writes to
    /// its Lease must not wait on the election).
    pub fn unguarded(&self) -> Client {
        Client {
            inner: self.inner.clone(),
            guard: None,
        }
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

    /// Sends `req` and returns the response: the status code and the body
    /// reader, not yet read.
    fn call(
        &self,
        req: &Request,
        timeout: Duration,
    ) -> Result<ureq::http::Response<ureq::Body>, Error> {
        self.check_guard(req)?;
        let what = req.what();
        let url = format!("{}{}", self.inner.server, req.uri());
        let mut builder = ureq::http::Request::builder()
            .method(req.method.as_str())
            .uri(&url);
        match &self.inner.bearer {
            Bearer::None => {}
            Bearer::Fixed(t) => builder = builder.header("Authorization", format!("Bearer {t}")),
            Bearer::File(f) => {
                builder = builder.header("Authorization", format!("Bearer {}", f.get(&what)?));
            }
        }
        if let Some(ct) = req.content_type {
            builder = builder.header("Content-Type", ct);
        }
        let transport = |e: ureq::Error| Error::Transport {
            what: what.clone(),
            message: e.to_string(),
        };
        let built = |e: ureq::http::Error| Error::InvalidRequest {
            message: format!("{what}: {e}"),
        };
        let agent = &self.inner.agent;
        let result = match &req.body {
            Some(body) => {
                let r = builder.body(body.clone()).map_err(built)?;
                let r = agent
                    .configure_request(r)
                    .timeout_global(Some(timeout))
                    .build();
                agent.run(r)
            }
            None => {
                let r = builder.body(()).map_err(built)?;
                let r = agent
                    .configure_request(r)
                    .timeout_global(Some(timeout))
                    .build();
                agent.run(r)
            }
        };
        result.map_err(transport)
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
        let what = req.what();
        let resp = self.call(req, timeout)?;
        let code = resp.status().as_u16();
        let body = resp.into_body();
        if (200..300).contains(&code) {
            self.read_capped(&what, body, self.inner.limits.body)
        } else {
            // The Status body is only for the message; a cut-off one is
            // still worth its first megabyte.
            let mut buf = Vec::new();
            let _ = body
                .into_with_config()
                .limit(u64::MAX)
                .reader()
                .take(self.inner.limits.error_body)
                .read_to_end(&mut buf);
            Err(decide_error(&what, code, &buf))
        }
    }

    /// Opens a streaming request (a watch) whose timeout is `timeout`;
    /// returns the body reader on success.
    pub(crate) fn open_stream(
        &self,
        req: &Request,
        timeout: Duration,
    ) -> Result<ureq::BodyReader<'static>, Error> {
        let what = req.what();
        let resp = self.call(req, timeout)?;
        let code = resp.status().as_u16();
        let body = resp.into_body();
        let reader = body.into_with_config().limit(u64::MAX).reader();
        if (200..300).contains(&code) {
            Ok(reader)
        } else {
            let mut buf = Vec::new();
            let _ = reader
                .take(self.inner.limits.error_body)
                .read_to_end(&mut buf);
            Err(decide_error(&what, code, &buf))
        }
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
        let req = api.get(name)?;
        let bytes = self.send(&req)?;
        Client::decode(&req, &bytes)
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
        let req = api.create(Client::json(body)?)?;
        let bytes = self.send(&req)?;
        Client::decode(&req, &bytes)
    }

    /// PUT a whole object. Its metadata.resourceVersion, when set, makes
    /// the write fail with Conflict if the object changed since.
    pub fn replace<T: Object, B: Serialize + ?Sized>(
        &self,
        api: &Api,
        name: &str,
        body: &B,
    ) -> Result<T, Error> {
        let req = api.replace(name, Client::json(body)?)?;
        let bytes = self.send(&req)?;
        Client::decode(&req, &bytes)
    }

    /// PUT the status subresource.
    pub fn replace_status<T: Object, B: Serialize + ?Sized>(
        &self,
        api: &Api,
        name: &str,
        body: &B,
    ) -> Result<T, Error> {
        let req = api.replace_status(name, Client::json(body)?)?;
        let bytes = self.send(&req)?;
        Client::decode(&req, &bytes)
    }

    /// PATCH with a JSON merge patch.
    pub fn merge_patch<T: Object>(
        &self,
        api: &Api,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<T, Error> {
        let req = api.merge_patch(name, Client::json(patch)?)?;
        let bytes = self.send(&req)?;
        Client::decode(&req, &bytes)
    }

    /// PATCH the status subresource with a JSON merge patch.
    pub fn merge_patch_status<T: Object>(
        &self,
        api: &Api,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<T, Error> {
        let req = api.merge_patch_status(name, Client::json(patch)?)?;
        let bytes = self.send(&req)?;
        Client::decode(&req, &bytes)
    }

    /// DELETE one object. The answer (the object with a deletion
    /// timestamp, or a Status) is not decoded.
    pub fn delete(&self, api: &Api, name: &str, params: &DeleteParams) -> Result<(), Error> {
        let req = api.delete(name, params)?;
        self.send(&req).map(|_| ())
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
}
