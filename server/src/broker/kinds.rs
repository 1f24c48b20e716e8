//! The registry of built-in capability kinds (DESIGN.md section 5): what each kind is,
//! which manifest keys it takes, and what it needs from the tool's config.
//! The broker that performs actions arrives with the grants issue; the manifest check
//! uses this registry today, so a manifest is refused for the same reasons it will be then.

/// A manifest key a grant may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrantKey {
    Only,
    Each,
    Max,
    Uses,
    Needs,
    IdempotencyKey,
    Headers,
    Path,
    Mode,
    Init,
}

impl GrantKey {
    pub fn name(self) -> &'static str {
        match self {
            GrantKey::Only => "only",
            GrantKey::Each => "each",
            GrantKey::Max => "max",
            GrantKey::Uses => "uses",
            GrantKey::Needs => "needs",
            GrantKey::IdempotencyKey => "idempotency_key",
            GrantKey::Headers => "headers",
            GrantKey::Path => "path",
            GrantKey::Mode => "mode",
            GrantKey::Init => "init",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapKind {
    pub name: &'static str,
    /// Keys the kind accepts; any other key in its grant is refused.
    pub keys: &'static [GrantKey],
    /// Keys the kind requires.
    pub required: &'static [GrantKey],
    /// Whether it reaches the network (so the tool must set `net` timeouts).
    pub network: bool,
    /// Whether it only reads (never changes the world).
    pub read_only: bool,
    /// For composite kinds: the names `needs` must hold, and the kind each must have
    /// (`None`: a secret reference `{ "env": NAME }`).
    pub needs: &'static [(&'static str, Option<&'static str>)],
}

use GrantKey::*;

const HTTP_READ_KEYS: &[GrantKey] = &[Only, Uses, Headers];
// Money limits need a kind that builds its own request (so the checked amount is the sent
// one): raw HTTP kinds take none.
const HTTP_WRITE_KEYS: &[GrantKey] = &[Only, Uses, IdempotencyKey, Headers];

pub const KINDS: &[CapKind] = &[
    CapKind {
        name: "net.http.get",
        keys: HTTP_READ_KEYS,
        required: &[Only],
        network: true,
        read_only: true,
        needs: &[],
    },
    CapKind {
        name: "net.http.post",
        keys: HTTP_WRITE_KEYS,
        required: &[Only],
        network: true,
        read_only: false,
        needs: &[],
    },
    CapKind {
        name: "net.http.put",
        keys: HTTP_WRITE_KEYS,
        required: &[Only],
        network: true,
        read_only: false,
        needs: &[],
    },
    CapKind {
        name: "net.http.patch",
        keys: HTTP_WRITE_KEYS,
        required: &[Only],
        network: true,
        read_only: false,
        needs: &[],
    },
    CapKind {
        name: "net.http.delete",
        keys: HTTP_WRITE_KEYS,
        required: &[Only],
        network: true,
        read_only: false,
        needs: &[],
    },
    CapKind {
        name: "payments.stripe.refund",
        keys: &[Each, Max, Uses, Needs],
        required: &[Needs],
        network: true,
        read_only: false,
        needs: &[("get", Some("net.http.get")), ("post", Some("net.http.post")), ("key", None)],
    },
    CapKind {
        name: "db.sqlite",
        keys: &[Path, Mode, Uses, Init],
        required: &[Path, Mode],
        network: false,
        read_only: false,
        needs: &[],
    },
];

pub fn find(name: &str) -> Option<&'static CapKind> {
    KINDS.iter().find(|kind| kind.name == name)
}

pub fn names() -> String {
    KINDS.iter().map(|kind| kind.name).collect::<Vec<_>>().join(", ")
}
