//! `only` URL patterns (DESIGN.md section 5): a URL is allowed when its normalised form
//! matches a pattern whole. `*` matches a run of characters other than `/`, `?` and `#`, so
//! it can never reach into another path segment or the query. Userinfo, dot segments and
//! encoded dots or slashes are refused outright: they are how an allowlist is tricked.

/// The normalised form of `url`, or why it is refused.
pub fn normalise(url: &str) -> Result<String, String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("`{url}` is not a URL ({e})"))?;
    if parsed.scheme() != "https" && parsed.scheme() != "http" {
        return Err(format!("`{url}` is not an http or https URL"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!("`{url}` carries user information"));
    }
    let raw_path = url.split_once("://").map(|(_, rest)| rest).unwrap_or(url);
    let lowered = raw_path.to_ascii_lowercase();
    for trick in ["%2e", "%2f", "%5c", "\\"] {
        if lowered.contains(trick) {
            return Err(format!("`{url}` encodes a dot, a slash or a backslash"));
        }
    }
    if raw_path.split(['/', '?', '#']).any(|segment| segment == "." || segment == "..") {
        return Err(format!("`{url}` has a `.` or `..` path segment"));
    }
    if parsed.fragment().is_some() {
        return Err(format!("`{url}` has a fragment"));
    }
    // The url crate lowercases the host, drops a default port and keeps an explicit one.
    Ok(parsed.to_string())
}

/// Whether `url` (already normalised) matches `pattern` whole.
pub fn matches(pattern: &str, url: &str) -> bool {
    fn go(pattern: &[u8], url: &[u8]) -> bool {
        match pattern.split_first() {
            None => url.is_empty(),
            Some((b'*', rest)) => {
                // At least one character: an empty id is not an id.
                if url.first().is_none_or(|c| matches!(c, b'/' | b'?' | b'#')) {
                    return false;
                }
                let mut i = 1;
                loop {
                    if go(rest, &url[i..]) {
                        return true;
                    }
                    if i == url.len() || matches!(url[i], b'/' | b'?' | b'#') {
                        return false;
                    }
                    i += 1;
                }
            }
            Some((&c, rest)) => url.first() == Some(&c) && go(rest, &url[1..]),
        }
    }
    go(pattern.as_bytes(), url.as_bytes())
}

/// Checks `url` against a grant's `only` list; the normalised URL when allowed.
pub fn allowed(only: &[String], url: &str) -> Result<String, String> {
    let normal = normalise(url)?;
    // Patterns are normalised the same way, with `*` kept literally.
    if only.iter().any(|pattern| matches(&normalise_pattern(pattern), &normal)) {
        Ok(normal)
    } else {
        Err(format!("`{normal}` is outside the grant's `only` list ({})", only.join(", ")))
    }
}

fn normalise_pattern(pattern: &str) -> String {
    let marker = "warden-wildcard-7f3a";
    match normalise(&pattern.replace('*', marker)) {
        Ok(normal) => normal.replace(marker, "*"),
        Err(_) => pattern.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONLY: &[&str] = &["https://api.stripe.com/v1/payment_intents/*", "https://api.stripe.com/v1/refunds"];

    fn check(url: &str) -> Result<String, String> {
        allowed(&ONLY.iter().map(|s| s.to_string()).collect::<Vec<_>>(), url)
    }

    #[test]
    fn allows_what_the_patterns_name() {
        assert!(check("https://api.stripe.com/v1/payment_intents/pi_123").is_ok());
        assert!(check("https://API.Stripe.com:443/v1/refunds").is_ok());
    }

    #[test]
    fn refuses_the_tricks() {
        for url in [
            "https://api.stripe.com/v1/payment_intents/pi_1/../../charges",
            "https://api.stripe.com/v1/payment_intents/%2e%2e/charges",
            "https://api.stripe.com/v1/payment_intents/a%2Fb",
            "https://evil@api.stripe.com/v1/refunds",
            "https://api.stripe.com.evil.com/v1/refunds",
            "https://api.stripe.com:8443/v1/refunds",
            "http://api.stripe.com/v1/refunds",
            "https://api.stripe.com/v1/refunds?x=1",
            "https://api.stripe.com/v1/payment_intents/a/b",
            "https://api.stripe.com/v1/payment_intents/",
            "https://api.stripe.com/v1/refunds#frag",
            "ftp://api.stripe.com/v1/refunds",
            "https://api.stripe.com/v1/./refunds",
            "https://api.stripe.com\\v1\\refunds",
        ] {
            assert!(check(url).is_err(), "{url} was allowed");
        }
    }
}
