//! The simulated world's fixed names: its root folder, its services' hosts, its secrets and
//! tokens. The world, the workload and the checks all name them; none of them owns them.

/// The header secret notes and reflect tools attach: the checker searches every output for
/// it, escaped too. Its `/`, `<`, `>` and `&` are what PHP and Go escape in JSON.
pub const NOTES_TOKEN: &str = "nt/Xq7Zk<9Wv>&Jm/3RpT";

/// The model's API key variable and value (a secret the checker searches every output for).
pub const MODEL_KEY_ENV: &str = "MODEL_API_KEY";

pub const MODEL_KEY: &str = "sk-ant-SIMMODELKEY-5d0c";

pub const PAYMENTS_HOST: &str = "https://payments.sim";

pub const NOTES_HOST: &str = "https://notes.sim";

/// A misbehaving service: reflects the request's Authorization header back in a JSON body,
/// escaped as PHP (`/echo/php`: `\/`) or Go (`/echo/go`: `\u00XX` for `<`, `>`, `&`) would,
/// or answers `/big/<bytes>` with a body of that size, `/deep/<n>` with arrays nested n deep,
/// `/headers/<bytes>` with a header of that size.
pub const ECHO_HOST: &str = "https://echo.sim";

/// The simulated model provider (Anthropic's messages API). Every fifth request is answered
/// 429 and every seventh 500, so retries and give-ups happen without a fault planned.
pub const MODEL_HOST: &str = "https://model.sim";

/// The simulated PostgreSQL server's desk: its connection URL (a secret, with a password the
/// checker searches every output for), the variable holding it, and its key among the
/// in-memory databases.
pub const PG_URL_ENV: &str = "DESK_PG_URL";

pub const PG_PASSWORD: &str = "pgSIMPWx7f3a:q";

pub const PG_URL: &str = "postgres://warden:pgSIMPWx7f3a%3Aq@pg.sim/desk";

pub const PG_DESK: &str = "postgres://pg.sim/desk";

/// The PostgreSQL store a world on the store keeps its ledger and records in
/// (`server.store.postgres`): the variable holding its URL, and the URL (with a password the
/// checker searches every output for).
pub const STORE_URL_ENV: &str = "WARDEN_STORE_URL";

pub const STORE_PASSWORD: &str = "stSIMPWq91c";

pub const STORE_URL: &str = "postgres://warden:stSIMPWq91c@store.sim/warden";

/// The payment key the world's grants attach: the checker searches every output for it.
pub const SECRET: &str = "sk_test_SIMSECRET_7c1e";

/// The bearer token an HTTP world's server requires and its client sends (a secret too: the
/// checker searches every output for it).
pub const HTTP_TOKEN: &str = "sim-http-Hq7ZxK2mPw9RtV4n3L";

pub const HTTP_TOKEN_ENV: &str = "WARDEN_HTTP_TOKEN";

/// An OAuth world's issuer, the audience its tokens name, the issuer's public keys (the file
/// the server reads), and the access token of each of the client model's principals: ES256,
/// signed once with a key that was not kept, valid until 2100.
pub const OAUTH_ISSUER: &str = "https://issuer.sim";

pub const OAUTH_AUDIENCE: &str = "http://127.0.0.1:8931/mcp";

pub const OAUTH_JWKS: &str = r#"{"keys":[{"kty":"EC","crv":"P-256","x":"glTzCnjywYeqn6jxrrMK8mRQlQo3otPeXatBMU8frx8","y":"KhMS3G1XqqOPcwFwU73gVyeKNLXB_M0AlPRGMG4tKc8","kid":"sim","alg":"ES256","use":"sig"},{"kty":"EC","crv":"P-256","x":"WqhzTdg_hZ4CRkbHPI94vCN9gLRjdTuX9yLV8RYYDxw","y":"5dmXN5O6se7lprxoTbZkQL-9-9M-dZoNkKgjU7i8dmY","kid":"sim2","alg":"ES256","use":"sig"}]}"#;

/// A principal whose token grants the scope `other` alone (no tool of a world asks for it),
/// signed with a second key of the issuer: its calls are the ones a tool's `scopes` refuse.
pub const UNSCOPED_PRINCIPAL: (&str, &str) = ("carol", "eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6InNpbTIifQ.eyJpc3MiOiJodHRwczovL2lzc3Vlci5zaW0iLCJhdWQiOiJodHRwOi8vMTI3LjAuMC4xOjg5MzEvbWNwIiwic3ViIjoiY2Fyb2wiLCJleHAiOjQxMDI0NDQ4MDAsInNjb3BlIjoib3RoZXIifQ.YNdrXe0sFR8mxmb4KAgSrC_xvbICT_pbDf2Ucpahk5bPvMPFsWFGz3RExTY8rw6Tz3M4KfKezPEpf1ZsjkODPQ");

/// The scope the world's principals' tokens grant and every tool of an OAuth world asks for.
pub const TOOL_SCOPE: &str = "notes";

/// How the ids of the calls the server must refuse begin (`workload/refusable.rs`; string
/// ids: their answers are not the workload's).
pub const REFUSABLE_ID_PREFIX: &str = "refuse-";

/// Whether a call of this id is sent as the principal no tool's `scopes` admit.
pub fn is_sent_unscoped(id: &str) -> bool {
    id.starts_with(REFUSABLE_ID_PREFIX) && id.ends_with("-scope")
}

pub const PRINCIPALS: [(&str, &str); 2] = [
    ("alice", "eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6InNpbSJ9.eyJpc3MiOiJodHRwczovL2lzc3Vlci5zaW0iLCJhdWQiOiJodHRwOi8vMTI3LjAuMC4xOjg5MzEvbWNwIiwic3ViIjoiYWxpY2UiLCJleHAiOjQxMDI0NDQ4MDAsInNjb3BlIjoibm90ZXMifQ.ZA6c5H-LRTJ2p5gEhvWfG60pst8mnB-9GBWFtW89phdT9khDy7wzBbH_lKejlBbb7Y5Ur83QxRoC_1D2qMnNVw"),
    ("bob", "eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6InNpbSJ9.eyJpc3MiOiJodHRwczovL2lzc3Vlci5zaW0iLCJhdWQiOiJodHRwOi8vMTI3LjAuMC4xOjg5MzEvbWNwIiwic3ViIjoiYm9iIiwiZXhwIjo0MTAyNDQ0ODAwLCJzY29wZSI6Im5vdGVzIn0.LmfrAmYjHntTq9I0KV2FrFB6d3P7NCRHs1bqxTBMkjY3loVrTytaoS7WCBKK3rFKNMlhy4f9_xsnnQjUfssfmg"),
];

/// Where the simulator puts the operator's files.
pub const ROOT: &str = "/srv/warden";
