//! `subtask serve` as an OAuth 2.1 resource server, as the MCP
//! authorization specification describes it (`docs/auth.md`): protected
//! resource metadata (RFC 9728), bearer tokens (RFC 6750) that are JWT
//! access tokens issued for this server's resource URI (RFC 8707) by a
//! configured authorization server, checked against that server's JWKS,
//! found through its metadata (RFC 8414, or OpenID Connect discovery).
//!
//! A token's caller is the principal `ISSUER#SUBJECT`: every task it
//! creates is bound to that pair, and every path that honours principals
//! (every task method, `tasks/list`, `subscriptions/listen`, the
//! 2025-11-25 wire, the web view, the cluster) honours it. Its `scope`
//! claim grants capabilities ([`Grants`]).
//!
//! The cryptography is `jsonwebtoken`'s (RustCrypto backends); the keys are
//! fetched with reqwest, cached per issuer by key id, and fetched again
//! when a token names a key id not in the cache (at most once per
//! [`REFETCH_EVERY`] per issuer), so an authorization server's key
//! rotation needs no restart.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use super::{Grants, Principal};

/// How often, at most, an issuer's keys are fetched again for a token
/// naming an unknown key id.
pub const REFETCH_EVERY: Duration = Duration::from_secs(10);

/// The signature algorithms taken (asymmetric only: a resource server
/// never holds an authorization server's secret).
const ALGORITHMS: [Algorithm; 7] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// The scope names that grant each capability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeNames {
    /// Call tools and read one's own tasks (`tools/*`, `tasks/get`,
    /// `tasks/result`, `tasks/list`, `tasks/update`, streams).
    pub tasks: String,
    /// Steer, pause, resume and cancel one's own tasks (the methods, the
    /// control tools and the web view's commands).
    pub control: String,
    /// The web view (`/ui`) and `/metrics`.
    pub observe: String,
}

impl Default for ScopeNames {
    /// `mcp:tasks`, `mcp:control`, `mcp:observe`.
    fn default() -> Self {
        ScopeNames {
            tasks: "mcp:tasks".into(),
            control: "mcp:control".into(),
            observe: "mcp:observe".into(),
        }
    }
}

/// What `subtask serve` needs to take access tokens from authorization
/// servers.
#[derive(Debug, Clone)]
pub struct OAuthConfig {
    /// This server's resource URI (the `/mcp` endpoint's canonical URL, e.g.
    /// `https://mcp.example.com/mcp`): a token's `aud` must name it.
    pub resource: String,
    /// The authorization servers' issuer identifiers; a token's `iss` must
    /// be one of them.
    pub issuers: Vec<String>,
    /// Which scope grants what.
    pub scopes: ScopeNames,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// The client id the web view signs in with at the (first)
    /// authorization server: a public client (no secret) whose redirect
    /// URI is this server's `/ui/callback` (at the resource URI's origin).
    /// `None`: the web view asks for a token to paste.
    pub ui_client: Option<String>,
}

impl OAuthConfig {
    /// Tokens from `issuers` for `resource`, with the default scope names
    /// and 60 s of leeway.
    pub fn new(resource: impl Into<String>, issuers: Vec<String>) -> Self {
        OAuthConfig {
            resource: resource.into(),
            issuers,
            scopes: ScopeNames::default(),
            leeway: Duration::from_secs(60),
            ui_client: None,
        }
    }

    /// The URL of this resource's metadata (RFC 9728 §3.1: the well-known
    /// path inserted between the host and the resource's path).
    pub fn metadata_url(&self) -> String {
        let (origin, path) = split_origin(&self.resource);
        format!("{origin}/.well-known/oauth-protected-resource{path}")
    }

    /// The protected resource metadata document (RFC 9728 §2).
    pub fn metadata(&self) -> serde_json::Value {
        serde_json::json!({
            "resource": self.resource,
            "authorization_servers": self.issuers,
            "scopes_supported": [self.scopes.tasks, self.scopes.control, self.scopes.observe],
            "bearer_methods_supported": ["header"],
            "resource_name": "subtask",
        })
    }
}

/// `https://host:port/path` as (`https://host:port`, `/path`), the path
/// without a trailing `/` (empty for the root).
pub(crate) fn split_origin(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let cut = url[after_scheme..]
        .find('/')
        .map_or(url.len(), |i| after_scheme + i);
    let (origin, path) = url.split_at(cut);
    (origin, path.trim_end_matches('/'))
}

/// Why a token was refused (the `error_description` of the 401).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

/// A checked token: its principal and grants.
#[derive(Debug, Clone)]
pub struct Verified {
    /// `ISSUER#SUBJECT`.
    pub principal: Principal,
    /// What its scopes grant.
    pub grants: Grants,
}

/// A key and the algorithm its JWK names, if any.
type Key = (DecodingKey, Option<Algorithm>);

/// An issuer's keys: read under a short lock on every token; fetched again
/// by one caller at a time (the others wait for its result, holding no
/// lock).
struct Keys {
    state: parking_lot::Mutex<KeyState>,
    /// Woken when a fetch ends.
    fetched: tokio::sync::Notify,
}

struct KeyState {
    by_kid: Arc<HashMap<String, Key>>,
    /// When the last fetch started.
    last: Option<Instant>,
    /// A fetch is under way.
    fetching: bool,
}

/// How many verified tokens each shard of the cache keeps before it drops
/// the expired ones (and, if still full, all).
const CACHE_PER_SHARD: usize = 4096;

/// The verified-token cache's shards (by the token digest's first byte),
/// so that requests on different cores rarely share a lock.
const SHARDS: usize = 16;

/// Verified tokens by SHA-256: the caller and the token's `exp`.
type VerifiedTokens = HashMap<[u8; 32], (Verified, u64)>;

/// Checks access tokens; holds each issuer's keys, and the tokens it
/// verified (by SHA-256), so that a token presented again is taken at the
/// cost of a hash and a lookup until its `exp`, not a signature check per
/// request (an RS256 check costs about 200 µs of CPU with RustCrypto's
/// RSA: `SUBTASK_HTTP_ONLY=jwt cargo bench --bench http`).
pub(crate) struct Verifier {
    config: OAuthConfig,
    verified: [parking_lot::RwLock<VerifiedTokens>; SHARDS],
    /// Fetches metadata and keys; the web view's sign-in redeems codes
    /// with it (`signin.rs`).
    pub(crate) http: reqwest::Client,
    keys: HashMap<String, Keys>,
    /// The metadata URL, computed once.
    pub(crate) metadata_url: String,
}

#[derive(Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    exp: u64,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct Unverified {
    iss: Option<String>,
}

/// An authorization server's metadata, the fields used here.
#[derive(Deserialize)]
pub(crate) struct ServerMetadata {
    issuer: String,
    jwks_uri: String,
    /// Where the web view's sign-in sends the browser.
    #[serde(default)]
    pub(crate) authorization_endpoint: Option<String>,
    /// Where it redeems the code.
    #[serde(default)]
    pub(crate) token_endpoint: Option<String>,
}

impl Verifier {
    pub(crate) fn new(config: OAuthConfig) -> Verifier {
        let keys = config
            .issuers
            .iter()
            .map(|i| {
                (
                    i.clone(),
                    Keys {
                        state: parking_lot::Mutex::new(KeyState {
                            by_kid: Arc::new(HashMap::new()),
                            last: None,
                            fetching: false,
                        }),
                        fetched: tokio::sync::Notify::new(),
                    },
                )
            })
            .collect();
        // reqwest's rustls needs a process-wide crypto provider (`crate::tls`).
        crate::tls::install_provider();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("a reqwest client with the default TLS settings builds");
        Verifier {
            verified: std::array::from_fn(|_| parking_lot::RwLock::new(HashMap::new())),
            metadata_url: config.metadata_url(),
            config,
            http,
            keys,
        }
    }

    pub(crate) fn config(&self) -> &OAuthConfig {
        &self.config
    }

    /// Checks `token`: its issuer is configured, its signature verifies
    /// with one of the issuer's keys, its audience is this resource, it is
    /// not expired or not yet valid (with the leeway), and it names a
    /// subject.
    pub(crate) async fn verify(&self, token: &str) -> Result<Verified, Refusal> {
        use sha2::Digest as _;
        let digest: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
        let shard = &self.verified[usize::from(digest[0]) % SHARDS];
        let now = jsonwebtoken::get_current_timestamp();
        if let Some((v, exp)) = shard.read().get(&digest)
            && now <= exp.saturating_add(self.config.leeway.as_secs())
        {
            return Ok(v.clone());
        }
        let verified = self.verify_signed(token).await?;
        let (v, exp) = verified;
        let mut map = shard.write();
        if map.len() >= CACHE_PER_SHARD {
            let leeway = self.config.leeway.as_secs();
            map.retain(|_, (_, e)| now <= e.saturating_add(leeway));
            if map.len() >= CACHE_PER_SHARD {
                map.clear();
            }
        }
        map.insert(digest, (v.clone(), exp));
        Ok(v)
    }

    /// [`Verifier::verify`] without the cache: the signature and claims
    /// checked; the verified caller and the token's `exp`.
    async fn verify_signed(&self, token: &str) -> Result<(Verified, u64), Refusal> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| Refusal(format!("not a JWT: {e}")))?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(Refusal(format!(
                "signature algorithm {:?} is not accepted",
                header.alg
            )));
        }
        // The issuer decides which keys to check the signature with; it is
        // checked again, verified, below.
        let iss = jsonwebtoken::dangerous::insecure_decode_claims::<Unverified>(token)
            .ok()
            .and_then(|c| c.iss)
            .ok_or_else(|| Refusal("the token names no issuer".into()))?;
        let Some(keys) = self.keys.get(&iss) else {
            return Err(Refusal(format!("issuer {iss:?} is not trusted by this server")));
        };
        let kid = header.kid.clone().unwrap_or_default();
        let (key, alg) = self
            .key(&iss, keys, &kid)
            .await
            .ok_or_else(|| Refusal(format!("signed by an unknown key ({kid:?})")))?;
        if alg.is_some_and(|a| a != header.alg) {
            return Err(Refusal(format!("key {kid:?} is not for {:?}", header.alg)));
        }
        let mut v = Validation::new(header.alg);
        v.set_issuer(&[&iss]);
        v.set_audience(&[&self.config.resource]);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        v.validate_nbf = true;
        v.leeway = self.config.leeway.as_secs();
        let data = jsonwebtoken::decode::<Claims>(token, &key, &v).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind as K;
            Refusal(match e.kind() {
                K::ExpiredSignature => "the token expired".into(),
                K::ImmatureSignature => "the token is not valid yet".into(),
                K::InvalidAudience => {
                    format!("the token is not for this resource ({})", self.config.resource)
                }
                K::InvalidIssuer => "the token's issuer does not match".into(),
                K::InvalidSignature => "the token's signature does not verify".into(),
                other => format!("the token is not valid: {other:?}"),
            })
        })?;
        let c = data.claims;
        let scopes: Vec<&str> = match (&c.scope, &c.scp) {
            (Some(s), _) => s.split_whitespace().collect(),
            (None, Some(list)) => list.iter().map(String::as_str).collect(),
            (None, None) => Vec::new(),
        };
        let n = &self.config.scopes;
        let grants = Grants {
            tasks: scopes.contains(&n.tasks.as_str()),
            control: scopes.contains(&n.control.as_str()),
            observe: scopes.contains(&n.observe.as_str()),
        };
        Ok((
            Verified {
                principal: Principal(Arc::from(format!("{}#{}", c.iss, c.sub))),
                grants,
            },
            c.exp,
        ))
    }

    /// Issuer `issuer`'s keys as if just fetched (one JWK, as JSON).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn seed(&self, issuer: &str, jwk: &str) {
        let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_str(jwk).expect("a JWK");
        let key = DecodingKey::from_jwk(&jwk).expect("a usable JWK");
        if let Some(keys) = self.keys.get(issuer) {
            let mut st = keys.state.lock();
            let mut map = HashMap::new();
            map.insert(
                jwk.common.key_id.clone().unwrap_or_default(),
                (key, Some(Algorithm::RS256)),
            );
            st.by_kid = Arc::new(map);
            st.last = Some(Instant::now() + Duration::from_secs(365 * 24 * 3600));
        }
    }

    /// Key `kid` of issuer `iss`: from the cache, else after fetching the
    /// issuer's keys again (when no fetch started in the last
    /// [`REFETCH_EVERY`]; one at a time, the others waiting for it).
    async fn key(&self, iss: &str, keys: &Keys, kid: &str) -> Option<Key> {
        loop {
            // Registered before the state is read: a fetch that ends after
            // the read wakes this wait.
            let notified = keys.fetched.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let fetch = {
                let mut st = keys.state.lock();
                if let Some(k) = st.by_kid.get(kid) {
                    return Some(k.clone());
                }
                if st.fetching {
                    false
                } else if st.last.is_some_and(|t| t.elapsed() < REFETCH_EVERY) {
                    return None;
                } else {
                    st.fetching = true;
                    st.last = Some(Instant::now());
                    true
                }
            };
            if !fetch {
                notified.await;
                continue;
            }
            // Whatever happens to this request (it may be dropped mid-fetch),
            // the fetch ends and its waiters wake.
            struct Ending<'a>(&'a Keys);
            impl Drop for Ending<'_> {
                fn drop(&mut self) {
                    self.0.state.lock().fetching = false;
                    self.0.fetched.notify_waiters();
                }
            }
            let ending = Ending(keys);
            let fresh = self.fetch_keys(iss).await;
            let found = {
                let mut st = keys.state.lock();
                match fresh {
                    Ok(fresh) => st.by_kid = Arc::new(fresh),
                    Err(e) => {
                        tracing::warn!(issuer = %iss, error = %e, "fetching the authorization server's keys failed")
                    }
                }
                st.by_kid.get(kid).cloned()
            };
            drop(ending);
            return found;
        }
    }

    /// The issuer's keys, from its metadata's `jwks_uri`.
    async fn fetch_keys(
        &self,
        issuer: &str,
    ) -> Result<HashMap<String, (DecodingKey, Option<Algorithm>)>, String> {
        let meta = self.server_metadata(issuer).await?;
        let set: JwkSet = self.get_json(&meta.jwks_uri).await?;
        let mut keys = HashMap::new();
        for jwk in &set.keys {
            if jwk
                .common
                .public_key_use
                .as_ref()
                .is_some_and(|u| *u != jsonwebtoken::jwk::PublicKeyUse::Signature)
            {
                continue;
            }
            let Ok(key) = DecodingKey::from_jwk(jwk) else {
                continue;
            };
            let alg = jwk
                .common
                .key_algorithm
                .and_then(|a| a.to_string().parse::<Algorithm>().ok());
            keys.insert(jwk.common.key_id.clone().unwrap_or_default(), (key, alg));
        }
        tracing::info!(
            issuer,
            keys = keys.len(),
            "fetched the authorization server's keys"
        );
        Ok(keys)
    }

    /// The issuer's metadata (RFC 8414, then OpenID Connect discovery);
    /// it must name the same issuer.
    pub(crate) async fn server_metadata(&self, issuer: &str) -> Result<ServerMetadata, String> {
        let (origin, path) = split_origin(issuer);
        let candidates = [
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
        ];
        let mut last = String::new();
        let mut meta = None;
        for url in &candidates {
            match self.get_json::<ServerMetadata>(url).await {
                Ok(m) => {
                    meta = Some(m);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let meta = meta.ok_or_else(|| format!("no authorization server metadata: {last}"))?;
        if meta.issuer.trim_end_matches('/') != issuer.trim_end_matches('/') {
            return Err(format!(
                "the metadata names issuer {:?}, not {issuer:?}",
                meta.issuer
            ));
        }
        Ok(meta)
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, String> {
        let resp = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| format!("{url}: {}", chain(&e)))?;
        if !resp.status().is_success() {
            return Err(format!("{url}: HTTP {}", resp.status()));
        }
        resp.json::<T>().await.map_err(|e| format!("{url}: {e}"))
    }
}

/// An error with its sources, `: `-separated (reqwest's own message names
/// only the URL).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The protected resource metadata routes: `/.well-known/oauth-protected-resource`
/// and the same followed by the resource's path (RFC 9728 §3.1), public
/// (a client reads them before it has a token).
pub(crate) fn router<S: Clone + Send + Sync + 'static>(verifier: &Arc<Verifier>) -> axum::Router<S> {
    let document = Arc::new(verifier.config.metadata());
    let serve = move || {
        let document = document.clone();
        async move { axum::Json((*document).clone()) }
    };
    let base = "/.well-known/oauth-protected-resource";
    let (_, path) = split_origin(&verifier.config.resource);
    let router = axum::Router::new().route(base, axum::routing::get(serve.clone()));
    if path.is_empty() {
        router
    } else {
        router.route(&format!("{base}{path}"), axum::routing::get(serve))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An authorization server's metadata and keys are fetched over TLS
    /// (a refused connection, not a scheme this build cannot speak).
    #[tokio::test]
    async fn https_urls_are_fetched_over_tls() {
        let v = Verifier::new(OAuthConfig::new("http://127.0.0.1:1/mcp", vec![]));
        let e = v
            .get_json::<serde_json::Value>("https://127.0.0.1:9/.well-known/openid-configuration")
            .await
            .unwrap_err();
        assert!(e.contains("Connection refused"), "{e}");
        assert!(!e.contains("scheme is not http"), "{e}");
    }

    #[test]
    fn the_metadata_url_inserts_the_well_known_path_before_the_resource_path() {
        let c = OAuthConfig::new("http://127.0.0.1:8750/mcp", vec![]);
        assert_eq!(
            c.metadata_url(),
            "http://127.0.0.1:8750/.well-known/oauth-protected-resource/mcp"
        );
        let c = OAuthConfig::new("https://example.com", vec![]);
        assert_eq!(
            c.metadata_url(),
            "https://example.com/.well-known/oauth-protected-resource"
        );
        assert_eq!(split_origin("http://a:1/x/y/"), ("http://a:1", "/x/y"));
    }
}
