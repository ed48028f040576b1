//! Bearer tokens and their challenges: any `Authorization` header value
//! through the OAuth resource server's check (`server::oauth`,
//! `docs/auth.md`), with one trusted issuer whose key is known up front
//! (no network: its keys are never fetched again).
//!
//! # Input
//!
//! The header's bytes, as a client sends them (`Bearer <JWT>`, or
//! anything else). The seeds (`fuzz/corpus/bearer_tokens/`) hold tokens
//! signed with the key below: valid, expired, for another audience, from
//! another issuer, naming another key, without scopes.
//!
//! # Properties
//!
//! * No panic, whatever the bytes.
//! * A caller let through presented `Bearer <token>` whose claims name the
//!   trusted issuer and this resource, is `ISSUER#SUBJECT`, and has the
//!   grants its `scope` claim lists.
//! * Every refusal is a 401 or 403 whose `WWW-Authenticate` is visible
//!   ASCII, starts with `Bearer `, names the resource metadata's URL, and
//!   is a list of `key="value"` pairs with no quote inside a value.

use axum::http::{HeaderMap, HeaderValue, header};

use crate::server::http_base::{Need, authenticate};
use crate::server::{OAuthConfig, Server, ServerConfig};

/// The trusted issuer.
pub const ISSUER: &str = "http://fuzz.invalid";
/// The resource the tokens are for.
pub const RESOURCE: &str = "http://127.0.0.1:8750/mcp";
/// The issuer's public key (RS256, kid `fuzz`); its private half signed
/// the seeds and is not kept.
const KEY: &str = r#"{"kty":"RSA","n":"jHtxAmvC6Wv4a4WT_QpYHHKGf85_CRSlobaFl0ufpD-Fp7ua3YdfjQv_iyiHqh9IZ8dOWEkG59MHbiEU9EvtAOkq8TriWnAmxRuedZ4fstAf-2hAKPN8cYPoWdjrTAcUJvYd3KTFq9MVl64bngHsEpbAoJfw9vwlH8PsXow6MR-uqz6qAdG-LvQxlYnSaF_kpEMNRG_jXLa3O0tfnMHynHQMfh5Mp0u-_ddiHlPqKMicjTYIUelqPA8CZZzcMxXbUs0bGJ6eZ6xzqMnk8eStzNKbFQjJAeAF8V_lUKj856H6SCuuvOu_0zPsm-zK1zUWoM1eQ7ptdUirOzDe_9hiww","e":"AQAB","kid":"fuzz","alg":"RS256","use":"sig"}"#;

thread_local! {
    /// A paused runtime and, built in it, a server trusting [`ISSUER`].
    static HARNESS: (tokio::runtime::Runtime, Server) = {
        let rt = super::paused_runtime();
        let server = {
            let _in = rt.enter();
            let mut config = ServerConfig {
                oauth: Some(OAuthConfig::new(RESOURCE, vec![ISSUER.to_owned()])),
                ..ServerConfig::default()
            };
            config.ui = false;
            let runtime = crate::runtime::Runtime::new(crate::runtime::RuntimeConfig::default());
            let server = Server::builder(runtime, config).build();
            server.seed_oauth_keys(ISSUER, KEY);
            server
        };
        (rt, server)
    };
}

/// [`authenticate`] of `headers` for [`Need::Tasks`] on the harness's server.
#[allow(clippy::result_large_err)]
fn check(headers: &HeaderMap) -> Result<crate::server::http_base::Caller, axum::response::Response> {
    HARNESS.with(|(rt, server)| {
        #[allow(clippy::result_large_err)]
        let outcome = rt.block_on(authenticate(headers, server, Need::Tasks));
        outcome
    })
}

/// Checks one header value (see the module's properties).
pub fn bearer_tokens(data: &[u8]) {
    let Ok(value) = HeaderValue::from_bytes(data) else {
        return;
    };
    let mut headers = HeaderMap::new();
    headers.insert(header::AUTHORIZATION, value);
    let outcome = check(&headers);
    match outcome {
        Ok(caller) => {
            let text = std::str::from_utf8(data).expect("an accepted header is text");
            let token = text
                .strip_prefix("Bearer ")
                .expect("accepted: a bearer token")
                .trim();
            let claims: serde_json::Value =
                jsonwebtoken::dangerous::insecure_decode_claims(token).expect("accepted: a decodable JWT");
            assert_eq!(claims["iss"], ISSUER);
            assert!(
                claims["aud"] == RESOURCE
                    || claims["aud"]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|x| x == RESOURCE)),
                "accepted for this resource only: {claims}"
            );
            let sub = claims["sub"].as_str().expect("accepted: a subject");
            assert_eq!(caller.0.name(), format!("{ISSUER}#{sub}"));
            let scopes: Vec<&str> = claims["scope"]
                .as_str()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            assert!(
                caller.1.tasks && scopes.contains(&"mcp:tasks"),
                "let through with mcp:tasks only"
            );
            assert_eq!(caller.1.control, scopes.contains(&"mcp:control"));
        }
        Err(resp) => {
            let status = resp.status().as_u16();
            assert!(
                status == 401 || status == 403,
                "a refusal is 401 or 403, got {status}"
            );
            let www = resp
                .headers()
                .get(header::WWW_AUTHENTICATE)
                .expect("a refusal names its challenge");
            let www = www.to_str().expect("a challenge is visible ASCII");
            assert!(www.bytes().all(|b| (b' '..=b'~').contains(&b)), "{www}");
            let params = www.strip_prefix("Bearer ").expect("a Bearer challenge");
            assert!(
                params.contains(
                    "resource_metadata=\"http://127.0.0.1:8750/.well-known/oauth-protected-resource/mcp\""
                ),
                "{www}"
            );
            // key="value" pairs, ", "-separated; a value is a quoted string
            // with no quote or backslash inside (so it needs no escapes).
            let mut rest = params;
            loop {
                let (k, after) = rest
                    .split_once("=\"")
                    .unwrap_or_else(|| panic!("{www}: {rest:?} is not key=\"value\""));
                assert!(
                    !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                    "{www}: key {k:?}"
                );
                let (v, after) = after
                    .split_once('"')
                    .unwrap_or_else(|| panic!("{www}: unterminated value"));
                assert!(!v.contains('\\'), "{www}");
                if after.is_empty() {
                    break;
                }
                rest = after
                    .strip_prefix(", ")
                    .unwrap_or_else(|| panic!("{www}: {after:?} after a value"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The corpus reaches both sides: the valid seed is let through (as
    /// `client-a`, with control), the others are refused.
    #[test]
    fn the_seeds_reach_both_the_accepted_and_the_refused_paths() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/bearer_tokens");
        for (seed, accepted) in [
            ("valid", true),
            ("expired", false),
            ("audience", false),
            ("issuer", false),
            ("kid", false),
        ] {
            let data = std::fs::read(dir.join(seed)).expect("a committed seed");
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, HeaderValue::from_bytes(&data).unwrap());
            let outcome = check(&headers);
            assert_eq!(outcome.is_ok(), accepted, "{seed}");
            if let Ok(caller) = outcome {
                assert_eq!(caller.0.name(), "http://fuzz.invalid#client-a");
                assert!(caller.1.control && !caller.1.observe);
            }
            bearer_tokens(&data);
        }
        let data = std::fs::read(dir.join("noscope")).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_bytes(&data).unwrap());
        let refused = check(&headers).unwrap_err();
        assert_eq!(refused.status(), 403, "a token without mcp:tasks");
    }
}
