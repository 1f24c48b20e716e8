//! The registry of built-in capability kinds (DESIGN.md section 5): what each kind is,
//! which manifest keys it takes, and what it needs from the tool's config; and the methods
//! an action can take. Both are enums everywhere past the manifest's text, written in
//! journals by the names the manifest uses.

use serde::{Deserialize, Serialize};

use crate::manifest::{CapabilityGrant, DbMode};

/// A capability kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    #[serde(rename = "net.http.get")]
    HttpGet,
    #[serde(rename = "net.http.post")]
    HttpPost,
    #[serde(rename = "net.http.put")]
    HttpPut,
    #[serde(rename = "net.http.patch")]
    HttpPatch,
    #[serde(rename = "net.http.delete")]
    HttpDelete,
    #[serde(rename = "payments.stripe.refund")]
    StripeRefund,
    #[serde(rename = "db.sqlite")]
    Sqlite,
    #[serde(rename = "db.postgres")]
    Postgres,
    /// A call to the manifest's model (its `model` section).
    #[serde(rename = "model")]
    Model,
}

impl Kind {
    /// The longest one action of this kind can take to send, by `net` (the action rule on the
    /// PostgreSQL store, `limits::LEASE_SEND_MARGIN_MS`): its connection and its answer, twice
    /// for a refund (its currency is read first), and a database session's grace past its
    /// statement timeout for `db.postgres` (its COMMIT can land that late). `None` for a model
    /// call, which keeps the rule for each of its requests itself (`run::model`): one starts only
    /// while the lease surely outlasts the margin, and one still on its way when the lease ends
    /// is charged by the run's next owner as a send a crash interrupted, never in doubt.
    pub fn longest_send_ms(self, net: &crate::manifest::NetConfig) -> Option<u64> {
        let once = net.connect_timeout_ms.unwrap_or(0).saturating_add(net.timeout_ms.unwrap_or(0));
        match self {
            Kind::Model => None,
            Kind::StripeRefund => Some(once.saturating_mul(2)),
            Kind::Postgres => Some(once.saturating_add(crate::limits::POSTGRES_CLIENT_GRACE_MS)),
            _ => Some(once),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::HttpGet => "net.http.get",
            Kind::HttpPost => "net.http.post",
            Kind::HttpPut => "net.http.put",
            Kind::HttpPatch => "net.http.patch",
            Kind::HttpDelete => "net.http.delete",
            Kind::StripeRefund => "payments.stripe.refund",
            Kind::Sqlite => "db.sqlite",
            Kind::Postgres => "db.postgres",
            Kind::Model => "model",
        }
    }

    /// A database kind (`db.*`): its actions are SQL statements, and a write records itself
    /// in the database's `warden_actions` table in the same transaction.
    pub fn is_database(self) -> bool {
        matches!(self, Kind::Sqlite | Kind::Postgres)
    }

    /// The plain HTTP kind of a method (`net.http.<method>`).
    pub fn http(method: Method) -> Option<Kind> {
        match method {
            Method::Get => Some(Kind::HttpGet),
            Method::Post => Some(Kind::HttpPost),
            Method::Put => Some(Kind::HttpPut),
            Method::Patch => Some(Kind::HttpPatch),
            Method::Delete => Some(Kind::HttpDelete),
            Method::Refund | Method::Query | Method::Execute | Method::Complete => None,
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What an action does: an HTTP method, a refund, or a SQL read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
    Refund,
    Query,
    Execute,
    /// A model call.
    Complete,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
            Method::Refund => "REFUND",
            Method::Query => "QUERY",
            Method::Execute => "EXECUTE",
            Method::Complete => "COMPLETE",
        }
    }

    /// Reads change nothing: sending one again is always safe. A model call changes nothing
    /// outside either (it only costs tokens).
    pub fn is_read(self) -> bool {
        matches!(self, Method::Get | Method::Query | Method::Complete)
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

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
    MaxTokens,
    Url,
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
            GrantKey::MaxTokens => "max_tokens",
            GrantKey::Url => "url",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KindSpec {
    pub kind: Kind,
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
    pub needs: &'static [(&'static str, Option<Kind>)],
}

use GrantKey::*;

const HTTP_READ_KEYS: &[GrantKey] = &[Only, Uses, Headers];
// Money limits need a kind that builds its own request (so the checked amount is the sent
// one): raw HTTP kinds take none.
const HTTP_WRITE_KEYS: &[GrantKey] = &[Only, Uses, IdempotencyKey, Headers];

pub const KINDS: &[KindSpec] = &[
    KindSpec {
        kind: Kind::HttpGet,
        keys: HTTP_READ_KEYS,
        required: &[Only],
        network: true,
        read_only: true,
        needs: &[],
    },
    KindSpec {
        kind: Kind::HttpPost,
        keys: HTTP_WRITE_KEYS,
        required: &[Only],
        network: true,
        read_only: false,
        needs: &[],
    },
    KindSpec {
        kind: Kind::HttpPut,
        keys: HTTP_WRITE_KEYS,
        required: &[Only],
        network: true,
        read_only: false,
        needs: &[],
    },
    KindSpec {
        kind: Kind::HttpPatch,
        keys: HTTP_WRITE_KEYS,
        required: &[Only],
        network: true,
        read_only: false,
        needs: &[],
    },
    KindSpec {
        kind: Kind::HttpDelete,
        keys: HTTP_WRITE_KEYS,
        required: &[Only],
        network: true,
        read_only: false,
        needs: &[],
    },
    KindSpec {
        kind: Kind::StripeRefund,
        keys: &[Each, Max, Uses, Needs],
        required: &[Needs],
        network: true,
        read_only: false,
        needs: &[("get", Some(Kind::HttpGet)), ("post", Some(Kind::HttpPost)), ("key", None)],
    },
    // Its timeouts are the `model` section's (`timeout_ms`, `retries`), not the tool's `net`.
    KindSpec {
        kind: Kind::Model,
        keys: &[Uses, MaxTokens],
        required: &[MaxTokens],
        network: false,
        read_only: true,
        needs: &[],
    },
    KindSpec {
        kind: Kind::Sqlite,
        keys: &[Path, Mode, Uses, Init],
        required: &[Path, Mode],
        network: false,
        read_only: false,
        needs: &[],
    },
    // Its connect and statement timeouts are the tool's `net` (seed 000 section 3).
    KindSpec {
        kind: Kind::Postgres,
        keys: &[Url, Mode, Uses],
        required: &[Url, Mode],
        network: true,
        read_only: false,
        needs: &[],
    },
];

/// The kind the manifest names `name`.
pub fn find(name: &str) -> Option<&'static KindSpec> {
    KINDS.iter().find(|spec| spec.kind.name() == name)
}

pub fn spec(kind: Kind) -> &'static KindSpec {
    KINDS.iter().find(|spec| spec.kind == kind).expect("every kind is in the registry")
}

pub fn names() -> String {
    KINDS.iter().map(|spec| spec.kind.name()).collect::<Vec<_>>().join(", ")
}
/// The worst case of one grant, for annotations and reservations: whether it only reads.
pub fn grant_reads_only(grant: &CapabilityGrant) -> bool {
    match grant.cap {
        Kind::Sqlite | Kind::Postgres => grant.mode == Some(DbMode::Read),
        kind => spec(kind).read_only,
    }
}
