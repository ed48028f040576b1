//! MRTR `requestState`: the server seals a tool's state into an opaque
//! string so the client can echo it but not forge or alter it.
//!
//! Format: `base64url(json) "." base64url(hmac_sha256(key, json))`. The key
//! is random per process, so a state does not survive a restart (the client
//! then starts the call over).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The key that seals request states.
#[derive(Clone)]
pub(crate) struct StateKey([u8; 32]);

impl StateKey {
    pub(crate) fn random() -> Self {
        let mut key = [0u8; 32];
        key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        StateKey(key)
    }

    fn mac(&self) -> HmacSha256 {
        HmacSha256::new_from_slice(&self.0).expect("HMAC accepts any key length")
    }

    /// Seals `state` (bound to the tool name, so a state cannot be replayed
    /// against another tool).
    pub(crate) fn seal(&self, tool: &str, state: &Value) -> String {
        let body = serde_json::to_vec(&serde_json::json!({"tool": tool, "state": state}))
            .expect("serializing a JSON value cannot fail");
        let mut mac = self.mac();
        mac.update(&body);
        let tag = mac.finalize().into_bytes();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(&body),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// Opens a sealed state for `tool`.
    pub(crate) fn open(&self, tool: &str, sealed: &str) -> Result<Value, &'static str> {
        let (body, tag) = sealed
            .split_once('.')
            .ok_or("requestState is not a state this server issued")?;
        let body = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| "requestState is not a state this server issued")?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| "requestState is not a state this server issued")?;
        let mut mac = self.mac();
        mac.update(&body);
        mac.verify_slice(&tag)
            .map_err(|_| "requestState failed its integrity check")?;
        let mut v: Value = serde_json::from_slice(&body).map_err(|_| "requestState is malformed")?;
        if v.get("tool").and_then(Value::as_str) != Some(tool) {
            return Err("requestState belongs to another tool");
        }
        Ok(v.get_mut("state").map(Value::take).unwrap_or(Value::Null))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_states_open_only_unaltered_and_for_their_tool() {
        let key = StateKey::random();
        let s = key.seal("t", &serde_json::json!({"round": 2}));
        assert_eq!(key.open("t", &s).unwrap(), serde_json::json!({"round": 2}));
        assert!(key.open("other", &s).is_err());
        assert!(key.open("t", &format!("{s}-TAMPERED")).is_err());
        assert!(key.open("t", "garbage").is_err());
        let mut bytes = s.into_bytes();
        bytes[3] ^= 1;
        assert!(key.open("t", &String::from_utf8_lossy(&bytes)).is_err());
        assert!(
            StateKey::random()
                .open("t", &key.seal("t", &Value::Null))
                .is_err()
        );
    }
}
