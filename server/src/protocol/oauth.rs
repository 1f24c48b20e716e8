//! Warden as an OAuth 2.1 resource server (seed 004): an access token is a JWT signed by one
//! of the issuer's keys (a JWKS file), for this server's audience, from the configured
//! issuer, not expired by this server's clock. Its subject and scopes become the principal a
//! call runs for. Only public-key algorithms are accepted: a token "signed" with an HMAC over
//! a public key (algorithm confusion) is refused, as is one without a signature.

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::call::Principal;
use crate::env::Env;

/// The longest access token read (a JWT of ordinary claims is well under 2 KiB).
pub const TOKEN_BYTES_MAX: usize = 8 * 1024;
/// The longest JWKS file read.
pub const JWKS_BYTES_MAX: usize = 1024 * 1024;
/// The longest subject kept as a principal, and the most scopes.
pub const SUBJECT_BYTES_MAX: usize = 256;
pub const SCOPES_MAX: usize = 64;
/// Clock skew allowed between the issuer and this server, on `exp` and `nbf`.
pub const LEEWAY_S: u64 = 60;
/// How often keys from a URL are fetched again (the issuer rotates them), and how long one
/// fetch may take.
pub const JWKS_REFRESH_MS: u64 = 3_600_000;
pub const JWKS_FETCH_MS: u64 = 10_000;

/// Where the issuer's public keys are.
#[derive(Clone, Debug)]
pub enum KeySource {
    File(std::path::PathBuf),
    /// Fetched at start and every `JWKS_REFRESH_MS`; https, or http on loopback.
    Url(String),
}

/// How access tokens are checked.
pub struct OAuthConfig {
    pub issuer: String,
    /// This server's resource identifier (its `/mcp` URL): the tokens' required audience.
    pub audience: String,
    keys: RefCell<JwkSet>,
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    exp: u64,
    #[serde(default)]
    nbf: Option<u64>,
    #[serde(default)]
    scope: Option<String>,
}

impl OAuthConfig {
    /// Reads the issuer's keys (through the seam) and checks the settings. Keys from a URL
    /// are fetched again every `JWKS_REFRESH_MS` (a failed fetch keeps the keys held).
    pub async fn load(env: &Env, issuer: &str, audience: &str, keys: &KeySource) -> Result<Rc<OAuthConfig>, String> {
        let parsed = url::Url::parse(audience).ok();
        let plain_url = parsed.as_ref().is_some_and(|url| {
            matches!(url.scheme(), "http" | "https")
                && url.host_str().is_some_and(|host| !host.is_empty())
                && url.username().is_empty()
                && url.password().is_none()
                && url.query().is_none()
                && url.fragment().is_none()
                && url.path().ends_with("/mcp")
                && url.as_str() == audience
        });
        if !plain_url {
            return Err(format!(
                "--oauth-audience {audience}: the audience is this server's resource URL (http or https, a host, a \
                 path ending in /mcp, no user, query or fragment)"
            ));
        }
        if issuer.is_empty() {
            return Err("--oauth-issuer: the issuer is required".to_string());
        }
        let first = read_keys(env, keys).await?;
        let config = Rc::new(OAuthConfig {
            issuer: issuer.to_string(),
            audience: audience.to_string(),
            keys: RefCell::new(first),
        });
        if let KeySource::Url(url) = keys {
            let (refresh_env, url, held) = (env.clone(), url.clone(), Rc::downgrade(&config));
            env.spawn.spawn(Box::pin(async move {
                loop {
                    refresh_env.clock.sleep(JWKS_REFRESH_MS).await;
                    let Some(config) = held.upgrade() else { return };
                    match read_keys(&refresh_env, &KeySource::Url(url.clone())).await {
                        Ok(keys) => *config.keys.borrow_mut() = keys,
                        Err(problem) => refresh_env.log(&format!("{problem}; the keys held are kept")),
                    }
                }
            }));
        }
        Ok(config)
    }

    /// Where this resource's metadata (RFC 9728) is served, for the 401's `WWW-Authenticate`.
    pub fn metadata_url(&self) -> String {
        let path = self.audience_path();
        let origin = &self.audience[..self.audience.len() - path.len()];
        format!("{origin}/.well-known/oauth-protected-resource{path}")
    }

    /// The audience URL's path (`/mcp`, or `/tenant/mcp` behind a proxy).
    pub fn audience_path(&self) -> String {
        url::Url::parse(&self.audience).map(|url| url.path().to_string()).unwrap_or_else(|_| "/mcp".into())
    }

    /// The protected resource metadata document (RFC 9728).
    pub fn metadata(&self) -> serde_json::Value {
        serde_json::json!({
            "resource": self.audience,
            "authorization_servers": [self.issuer],
            "bearer_methods_supported": ["header"],
        })
    }

    /// The principal a valid token names, or why the token is refused (never its contents).
    pub fn verify(&self, token: &str, now_s: u64) -> Result<Principal, String> {
        if token.len() > TOKEN_BYTES_MAX {
            return Err(format!("the token is over {TOKEN_BYTES_MAX} bytes"));
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| "the token is not a JWT".to_string())?;
        if !is_public_key_algorithm(header.alg) {
            return Err("the token's algorithm is not a public-key signature".to_string());
        }
        let keys = self.keys.borrow();
        let key = match &header.kid {
            Some(kid) => keys.find(kid),
            None if keys.keys.len() == 1 => keys.keys.first(),
            None => None,
        }
        .ok_or_else(|| "the token names no key of the issuer".to_string())?;
        let decoding = DecodingKey::from_jwk(key).map_err(|_| "the issuer's key cannot verify".to_string())?;
        drop(keys);
        let mut validation = Validation::new(header.alg);
        // Expiry is checked below against this server's clock (the seam), not the system's.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.required_spec_claims = HashSet::from(["exp", "sub", "aud", "iss"].map(String::from));
        validation.set_audience(&[&self.audience]);
        validation.set_issuer(&[&self.issuer]);
        let claims = jsonwebtoken::decode::<Claims>(token, &decoding, &validation)
            .map_err(|e| format!("the token is refused: {}", refusal(e.kind())))?
            .claims;
        if claims.exp.saturating_add(LEEWAY_S) <= now_s {
            return Err("the token has expired".to_string());
        }
        if claims.nbf.is_some_and(|nbf| nbf > now_s.saturating_add(LEEWAY_S)) {
            return Err("the token is not valid yet".to_string());
        }
        if claims.sub.is_empty() || claims.sub.len() > SUBJECT_BYTES_MAX || claims.sub.chars().any(is_hidden) {
            return Err(format!(
                "the token's subject is empty, over {SUBJECT_BYTES_MAX} bytes or holds a control or formatting character"
            ));
        }
        let scopes: Vec<String> = claims.scope.unwrap_or_default().split_whitespace().map(str::to_string).collect();
        if scopes.len() > SCOPES_MAX {
            return Err(format!("the token holds more than {SCOPES_MAX} scopes"));
        }
        Ok(Principal { subject: claims.sub, scopes })
    }
}

/// Characters that make a subject print as something else: controls, line and paragraph
/// separators, zero-width and direction marks, the byte-order mark.
fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{206F}' | '\u{FEFF}')
}

fn is_public_key_algorithm(alg: Algorithm) -> bool {
    !matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)
}

/// Why a token failed, in words that say nothing of its contents.
fn refusal(kind: &jsonwebtoken::errors::ErrorKind) -> &'static str {
    use jsonwebtoken::errors::ErrorKind;
    match kind {
        ErrorKind::InvalidSignature => "its signature does not verify",
        ErrorKind::InvalidAudience => "it is for another audience",
        ErrorKind::InvalidIssuer => "it is from another issuer",
        ErrorKind::MissingRequiredClaim(_) => "a required claim (sub, aud, iss, exp) is missing",
        ErrorKind::InvalidAlgorithm => "its algorithm is not its key's",
        _ => "it is malformed",
    }
}

/// The issuer's keys from a file or a URL, checked: public keys only, each usable.
async fn read_keys(env: &Env, source: &KeySource) -> Result<JwkSet, String> {
    let (shown, bytes) = match source {
        KeySource::File(path) => {
            let bytes =
                env.disk.read(path).await.map_err(|e| format!("{}: cannot read the JWKS: {e}", path.display()))?;
            (path.display().to_string(), bytes)
        }
        KeySource::Url(url) => (url.clone(), fetch(env, url).await?),
    };
    if bytes.len() > JWKS_BYTES_MAX {
        return Err(format!("{shown}: the JWKS holds {} bytes; the limit is {JWKS_BYTES_MAX}", bytes.len()));
    }
    #[derive(Deserialize)]
    struct AnyKeys {
        keys: Vec<serde_json::Value>,
    }
    let listed: AnyKeys = serde_json::from_slice(&bytes).map_err(|e| format!("{shown}: not a JWKS: {e}"))?;
    // Keys this server cannot use (another algorithm, a symmetric key) are left out, so an
    // issuer that adds one does not stop rotation; at least one must be usable.
    let usable: Vec<jsonwebtoken::jwk::Jwk> = listed
        .keys
        .into_iter()
        .filter_map(|key| serde_json::from_value::<jsonwebtoken::jwk::Jwk>(key).ok())
        .filter(|key| !matches!(key.algorithm, AlgorithmParameters::OctetKey(_)))
        .filter(|key| DecodingKey::from_jwk(key).is_ok())
        .collect();
    if usable.is_empty() {
        return Err(format!("{shown}: the JWKS holds no public key this server can use"));
    }
    Ok(JwkSet { keys: usable })
}

/// One GET of the keys, within `JWKS_FETCH_MS`: https, or http on loopback.
async fn fetch(env: &Env, url: &str) -> Result<Vec<u8>, String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("--oauth-jwks-url {url}: not a URL: {e}"))?;
    let loopback = matches!(parsed.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"));
    let allowed = (parsed.scheme() == "https" || (parsed.scheme() == "http" && loopback))
        && parsed.username().is_empty()
        && parsed.password().is_none();
    if !allowed {
        return Err(format!(
            "--oauth-jwks-url {url}: keys are fetched over https (http only on loopback), with no user or password"
        ));
    }
    let request = crate::env::HttpRequest {
        method: "GET".to_string(),
        url: url.to_string(),
        headers: vec![("accept".to_string(), "application/json".to_string())],
        body: Vec::new(),
        connect_timeout_ms: JWKS_FETCH_MS,
        timeout_ms: JWKS_FETCH_MS,
        body_bytes_max: JWKS_BYTES_MAX,
    };
    let response =
        env.net.request(request).await.map_err(|e| format!("{url}: fetching the JWKS failed: {}", e.message))?;
    if response.status != 200 {
        return Err(format!("{url}: fetching the JWKS answered HTTP {}", response.status));
    }
    Ok(response.body)
}
