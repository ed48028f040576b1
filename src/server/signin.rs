//! The web view's sign-in through the authorization server (feature `ui`):
//! the authorization code grant with PKCE (RFC 7636, S256) for the public
//! client [`OAuthConfig::ui_client`]. `/ui/signin` sends the browser to the
//! authorization endpoint, with the code verifier in a short-lived
//! `HttpOnly` cookie bound to the `state` (so any instance of a cluster
//! takes the callback); `/ui/callback` checks the `state`, redeems the
//! code with the verifier at the token endpoint and hands the access token
//! to the page in the URL's fragment (which no server sees), where the page
//! keeps it like a pasted one (`docs/auth.md`).
//!
//! [`OAuthConfig::ui_client`]: super::OAuthConfig::ui_client

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use sha2::Digest as _;

use super::oauth::{Verifier, chain, split_origin};
use crate::server::http_base::AppState;

const COOKIE: &str = "subtask_signin";

fn verifier_of(state: &AppState) -> Option<(&Verifier, &str)> {
    let v = state.server.inner.oauth.as_deref()?;
    let client = v.config().ui_client.as_deref()?;
    Some((v, client))
}

/// The callback URL: `/ui/callback` at the resource URI's origin.
fn redirect_uri(v: &Verifier) -> String {
    format!("{}/ui/callback", split_origin(&v.config().resource).0)
}

/// Percent-encoding of a query or form value (RFC 3986 unreserved kept).
fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn random(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).expect("the OS's random numbers");
    URL_SAFE_NO_PAD.encode(bytes)
}

fn plain(status: StatusCode, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message.to_owned(),
    )
        .into_response()
}

/// `GET /ui/api/signin`: whether the page can sign in through the
/// authorization server (public: the page asks before it has a token).
pub(crate) async fn info(State(state): State<AppState>) -> Response {
    let available = verifier_of(&state).is_some();
    axum::Json(serde_json::json!({"available": available})).into_response()
}

/// `GET /ui/signin`: to the authorization endpoint.
pub(crate) async fn start(State(state): State<AppState>) -> Response {
    let Some((v, client)) = verifier_of(&state) else {
        return plain(
            StatusCode::NOT_FOUND,
            "sign-in through an authorization server is not configured (--oauth-ui-client)",
        );
    };
    let Some(issuer) = v.config().issuers.first() else {
        return plain(StatusCode::NOT_FOUND, "no authorization server is configured");
    };
    let meta = match v.server_metadata(issuer).await {
        Ok(m) => m,
        Err(e) => {
            return plain(
                StatusCode::BAD_GATEWAY,
                &format!("the authorization server's metadata: {e}"),
            );
        }
    };
    let Some(endpoint) = meta.authorization_endpoint else {
        return plain(
            StatusCode::BAD_GATEWAY,
            "the authorization server names no authorization endpoint",
        );
    };
    let code_verifier = random(32);
    let challenge = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(code_verifier.as_bytes()));
    let st = random(16);
    let n = &v.config().scopes;
    let scope = format!("{} {} {}", n.tasks, n.control, n.observe);
    let sep = if endpoint.contains('?') { '&' } else { '?' };
    let location = format!(
        "{endpoint}{sep}response_type=code&client_id={}&redirect_uri={}&scope={}&state={}&code_challenge={challenge}\
         &code_challenge_method=S256&resource={}",
        enc(client),
        enc(&redirect_uri(v)),
        enc(&scope),
        enc(&st),
        enc(&v.config().resource),
    );
    let secure = if v.config().resource.starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!(
        "{COOKIE}={st}.{code_verifier}; Path=/ui/callback; HttpOnly; SameSite=Lax; Max-Age=600{secure}"
    );
    let mut resp = StatusCode::FOUND.into_response();
    if let (Ok(l), Ok(c)) = (HeaderValue::from_str(&location), HeaderValue::from_str(&cookie)) {
        resp.headers_mut().insert(header::LOCATION, l);
        resp.headers_mut().insert(header::SET_COOKIE, c);
    }
    resp
}

#[derive(Deserialize)]
pub(crate) struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
}

/// `GET /ui/callback`: the code redeemed, the page handed its token.
pub(crate) async fn finish(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<Callback>,
) -> Response {
    let Some((v, client)) = verifier_of(&state) else {
        return plain(
            StatusCode::NOT_FOUND,
            "sign-in through an authorization server is not configured",
        );
    };
    if let Some(e) = q.error {
        let d = q.error_description.unwrap_or_default();
        return plain(
            StatusCode::UNAUTHORIZED,
            &format!("the authorization server refused: {e} {d}"),
        );
    }
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(';'))
        .filter_map(|c| c.trim().strip_prefix(&format!("{COOKIE}=")).map(str::to_owned))
        .next();
    let (Some(code), Some(st), Some(cookie)) = (q.code, q.state, cookie) else {
        return plain(
            StatusCode::BAD_REQUEST,
            "the sign-in expired or was not started here: sign in again",
        );
    };
    let Some((expected, code_verifier)) = cookie.split_once('.') else {
        return plain(
            StatusCode::BAD_REQUEST,
            "a malformed sign-in cookie: sign in again",
        );
    };
    if expected != st {
        return plain(
            StatusCode::BAD_REQUEST,
            "the sign-in's state does not match: sign in again",
        );
    }
    let Some(issuer) = v.config().issuers.first() else {
        return plain(StatusCode::NOT_FOUND, "no authorization server is configured");
    };
    let endpoint = match v.server_metadata(issuer).await.map(|m| m.token_endpoint) {
        Ok(Some(e)) => e,
        Ok(None) => {
            return plain(
                StatusCode::BAD_GATEWAY,
                "the authorization server names no token endpoint",
            );
        }
        Err(e) => {
            return plain(
                StatusCode::BAD_GATEWAY,
                &format!("the authorization server's metadata: {e}"),
            );
        }
    };
    let form = format!(
        "grant_type=authorization_code&code={}&redirect_uri={}&client_id={}&code_verifier={}&resource={}",
        enc(&code),
        enc(&redirect_uri(v)),
        enc(client),
        enc(code_verifier),
        enc(&v.config().resource),
    );
    let answer = v
        .http
        .post(&endpoint)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await;
    let token = match answer {
        Ok(r) if r.status().is_success() => r.json::<TokenAnswer>().await.map_err(|e| e.to_string()),
        Ok(r) => {
            let status = r.status();
            Err(format!("HTTP {status}: {}", r.text().await.unwrap_or_default()))
        }
        Err(e) => Err(chain(&e)),
    };
    let token = match token {
        Ok(t) => t.access_token,
        Err(e) => {
            return plain(
                StatusCode::BAD_GATEWAY,
                &format!("redeeming the code failed: {e}"),
            );
        }
    };
    // The token goes to the page in the fragment, which no server sees.
    let mut resp = StatusCode::FOUND.into_response();
    let location = format!("/ui/#token={}", enc(&token));
    let clear = format!("{COOKIE}=; Path=/ui/callback; HttpOnly; SameSite=Lax; Max-Age=0");
    if let (Ok(l), Ok(c)) = (HeaderValue::from_str(&location), HeaderValue::from_str(&clear)) {
        resp.headers_mut().insert(header::LOCATION, l);
        resp.headers_mut().insert(header::SET_COOKIE, c);
    }
    resp
}
