//! `http_get_jwt_overhead`: what an OAuth access token costs a request
//! (`docs/auth.md`). Two subtask servers in the same run, alike but for
//! OAuth: one takes every caller as the anonymous principal, the other
//! checks an RS256 JWT access token on every request against the keys of
//! an authorization server (a small one here, serving its metadata and
//! JWKS; the keys are fetched once and cached, as in production). The same
//! 1,000 live tasks' `tasks/get` go to both, alternating windows; the
//! figure is server CPU per `tasks/get` with the token over without.
//! `SUBTASK_HTTP_ONLY=jwt`.

#[allow(unused_imports)]
use super::*;

/// A 2048-bit RSA key made for this bench (PKCS#1 DER, base64), and its
/// public half as a JWK.
const PRIVATE_DER: &str = "MIIEpAIBAAKCAQEApHKCpG+Udx8A8xZoHXYapwuDOidR7lsNxQQDpx7aYKsL6hMhUyGulNim7Te5Kn8HQcaB9tnC2Bi4l8CTTXh7IE3iBkkAfzbTNIWcGCPPkHg1u5P788TgpOtAoL8WJAmvQKqc8tTfLmLB+dolKuh6+E/OsqXlsYooJ+rB4HzDLPVEFQMSGZEiBq7XIUNW/Cqt9p4lqIs2X/Ir4u2Rz2fBaO1gobbxNlpyB4d2defIKkLhrAlYg14zW2zsxt2zIwIdNCBbdFjSkWJqvm4FESsHkYU5gPfkUp+7+85Dz2rhfrOsxKHPzwao2fWQJYvqUBMWX4qHy4qssTndFVLGDRhJAwIDAQABAoIBACiqcpkUSKwOfC8g3t1OO/gMFkb2u0GMvcJ3JCobLJiUI82eLnL+1MvVKa5mxcD3CcXfv3raTd8feeJ5ClQxk40hBWBVhCxxU9hcpAWqMWWB/JOm3DrjeEQAMwqtRl3iETcWGdrI/mnbnSlaoy9RrzshjTVLZho51oVMfeY0JBXFKUCxFsAfH2PDqTqwfXH8qKrd6feh/GwnUvHMTXN/0Cb56QJFF5uYpIujNcjCNHcZm2NlfYrT4aDHMc/oLN8HAwro7dF1ghpg7PT1IlDoWpUkQA1/kzpy4NMD4VAMx0vrfi8Fysb0cGKQ+PLTs+69+mTFOlYzDBVHfyX26GXxqTkCgYEA4bcQdjK4qQ7oM/U3dLfBSVdXnAioNS6pMdJc7skzNQ8CDhBICEwYAx8pjlaZ//u7mEByKlOeoeNkDptQDVMy16yMaeUFos6eov/QCgMaiAICoLy0bK3z6lc5j38Qum5HKODphzTcla3GwVuEbnuu1eKWukN+pUww+ypwhwf9w9sCgYEAuoMAAUkvuOeNcJBJA0QF5hArUMoSL9QRdbL4EOGuMR26IjSU/QM+ug+t6lWQT81xvbYaUiQx1IttXIWTXpForLQJXEvMmkCQkFt4pGeUFIiyXnufffYZOfxlb+jq6y2KG4xF2giFRsE4uj3YFVRVcuO+Zv/5GcSv2UcTtsPNK/kCgYEAnEoJAP7/9DeZOxjpbE0sbh8nT6iC6EhF6XSS2tjAN1YMAzbs2anu2oKCYMfAXIqvC65cHsjFx6zPBHowhPl98+7LTyvAqknNeGoPYE9j2JcjwK7Jc5NDmJkLBzxhleV0Km8J5JAKyS2JuSsoWOQVXI5H9fN0Rvqp09BAGI/E/A8CgYBtsfiByRqhRMbCSoo2un5BpobjWEXEDZVLRTxzKVi7GIHN9mEeQhdVdT1Tkoly9iEMdBsc7p7EJFDo1sMrHpiS4rySpR4sJwcfcD0PbMACJ7fIrCrM+b4yhYjfff0U3s7YjvLSXqqMR75mg1MgkF5FWT818xz+E9ldEFm+54A3eQKBgQDL0BQo0x18uhMxJLuU2ZIiub4rO/aSthtlnTS0B5RYs5ZUpKi4dCLzJfD3P/fkLGvv66KrD42YN8dulo680xdir5csP96wJovwaf3PEiBncKBP0XRpryJSVUjDB1qJpjyjvFBI/FdK0hrqW2gzYqFY9wg16B6tvqxeFbrSZ5iIZg==";
const PUBLIC_JWK: &str = r#"{"kty":"RSA","n":"pHKCpG-Udx8A8xZoHXYapwuDOidR7lsNxQQDpx7aYKsL6hMhUyGulNim7Te5Kn8HQcaB9tnC2Bi4l8CTTXh7IE3iBkkAfzbTNIWcGCPPkHg1u5P788TgpOtAoL8WJAmvQKqc8tTfLmLB-dolKuh6-E_OsqXlsYooJ-rB4HzDLPVEFQMSGZEiBq7XIUNW_Cqt9p4lqIs2X_Ir4u2Rz2fBaO1gobbxNlpyB4d2defIKkLhrAlYg14zW2zsxt2zIwIdNCBbdFjSkWJqvm4FESsHkYU5gPfkUp-7-85Dz2rhfrOsxKHPzwao2fWQJYvqUBMWX4qHy4qssTndFVLGDRhJAw","e":"AQAB","kid":"bench","alg":"RS256","use":"sig"}"#;

/// The authorization server: its metadata and JWKS on a loopback port, on
/// the load generator's runtime. Returns its issuer URL.
fn authorization_server(lg: &tokio::runtime::Runtime) -> String {
    lg.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let issuer = format!("http://{}", listener.local_addr().expect("addr"));
        let meta = serde_json::json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks")});
        let jwks: serde_json::Value = serde_json::json!({"keys": [serde_json::from_str::<serde_json::Value>(PUBLIC_JWK).expect("a JWK")]});
        let app = axum::Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                axum::routing::get(move || async move { axum::Json(meta) }),
            )
            .route("/jwks", axum::routing::get(move || async move { axum::Json(jwks) }));
        tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
        issuer
    })
}

/// An access token of `sub` for `resource` from `issuer` (an hour).
fn access_token(issuer: &str, resource: &str) -> String {
    use base64::Engine as _;
    let der = base64::engine::general_purpose::STANDARD
        .decode(PRIVATE_DER)
        .expect("base64");
    let key = jsonwebtoken::EncodingKey::from_rsa_der(&der);
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some("bench".into());
    header.typ = Some("at+jwt".into());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let claims = serde_json::json!({
        "iss": issuer, "sub": "bench-client", "aud": resource, "iat": now, "exp": now + 3600,
        "scope": "mcp:tasks mcp:control", "client_id": "bench-client",
    });
    jsonwebtoken::encode(&header, &claims, &key).expect("sign")
}

pub(crate) fn jwt_overhead(lg: &tokio::runtime::Runtime) {
    let issuer = authorization_server(lg);
    let plain = start_subtask(&Store::Memory);
    let resource = "http://bench.invalid/mcp".to_owned();
    let oauth = start_subtask_with(
        &Store::Memory,
        Some(subtask::server::OAuthConfig::new(
            resource.clone(),
            vec![issuer.clone()],
        )),
    );
    let bearer = format!("Bearer {}", access_token(&issuer, &resource));
    println!(
        "# jwt: two subtask servers, one without auth and one taking RS256 JWT access tokens (jsonwebtoken, \
         RustCrypto; the issuer's JWKS fetched once, at the first token); {} live tasks each; tasks/get on \
         random ones, {LOOPS} connections, alternating windows; token {} bytes",
        1000,
        bearer.len()
    );
    let mut hosts = [(&plain, None), (&oauth, Some(bearer))];
    let mut pools: Vec<Pool> = hosts
        .iter_mut()
        .map(|(h, auth)| {
            let mut pool = Pool::open(lg, h.addr, LOOPS);
            for c in &mut pool.conns {
                c.auth = auth.clone();
            }
            pool
        })
        .collect();
    let ids: Vec<Arc<Vec<String>>> = pools
        .iter_mut()
        .map(|p| Arc::new(prefill(lg, p, 1000).0))
        .collect();
    let mut stats = [Tally::default(), Tally::default()];
    for round in 0..ROUNDS {
        for (i, (host, _)) in hosts.iter().enumerate() {
            let w = measure(
                lg,
                host,
                &mut pools[i],
                LOOPS,
                window(),
                get_loop(ids[i].clone(), Expect::Live, round as u64),
            );
            stats[i].add(w);
        }
    }
    let [p, j] = &mut stats;
    let (plain_us, jwt_us) = (p.cpu_per_1k_ms(), j.cpu_per_1k_ms());
    println!(
        "# without auth: rounds {} gets/s, server CPU {:.1} us per get; with a JWT: rounds {} gets/s, server CPU \
         {:.1} us per get",
        p.rounds(),
        plain_us,
        j.rounds(),
        jwt_us
    );
    println!(
        "http_get_jwt_overhead: ratio={:.2} jwt_us={jwt_us:.1} plain_us={plain_us:.1} jwt_gets={:.0} plain_gets={:.0}",
        jwt_us / plain_us,
        j.rate(),
        p.rate()
    );
}
