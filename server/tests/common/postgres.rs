//! A database of its own, for one test, on the throwaway PostgreSQL cluster that
//! `scripts/postgres.sh` starts (scripts/test-all.sh starts it and exports its URL). Set-up
//! and ground truth go through `psql`, the server's own client, not through Warden.

use std::process::Command;

/// The variable holding the cluster's URL (with its password).
pub const CLUSTER_URL_ENV: &str = "WARDEN_TEST_PG_URL";

pub struct Pg {
    /// The URL of this test's database (a secret: it holds the password).
    pub url: String,
    cluster: String,
    name: String,
}

impl Pg {
    /// Creates database `warden_<label>_<pid>` (dropped with the value).
    pub fn create(label: &str) -> Pg {
        let cluster = std::env::var(CLUSTER_URL_ENV).unwrap_or_else(|_| {
            panic!(
                "{CLUSTER_URL_ENV} is not set: start the test cluster first \
                 (`source scripts/postgres.sh && postgres_start`), as scripts/test-all.sh does"
            )
        });
        let name = format!("warden_{label}_{}", std::process::id());
        psql(&cluster, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        psql(&cluster, &format!("CREATE DATABASE {name}"));
        let (root, _) = cluster.rsplit_once('/').expect("the cluster URL names a database");
        Pg { url: format!("{root}/{name}"), cluster, name }
    }

    /// Runs `sql` and returns what psql prints unaligned (`|` between columns).
    pub fn sql(&self, sql: &str) -> String {
        psql(&self.url, sql)
    }

    /// The password in the URL (what no output may hold).
    pub fn password(&self) -> String {
        let rest = self.url.split_once("://").unwrap().1;
        let credentials = rest.split_once('@').unwrap().0;
        credentials.split_once(':').unwrap().1.to_string()
    }

    /// This database's URL with another password.
    pub fn url_with_password(&self, password: &str) -> String {
        self.url.replacen(&self.password(), password, 1)
    }

    /// The tickets table the fixture's programs use: two open tickets, one of each kind of
    /// column Warden reads.
    pub fn desk(&self) {
        self.sql(
            "CREATE TABLE tickets (id INT PRIMARY KEY, status TEXT NOT NULL, note TEXT, urgent BOOLEAN, \
             score DOUBLE PRECISION, meta JSONB, opened TIMESTAMPTZ NOT NULL DEFAULT now()); \
             INSERT INTO tickets (id, status, urgent, score, meta) VALUES \
             (1, 'open', true, 2.5, '{\"tier\": \"gold\"}'), (2, 'open', false, NULL, NULL)",
        );
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .arg(&self.cluster)
            .args(["-Atq", "-c", &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)])
            .output();
    }
}

fn psql(url: &str, sql: &str) -> String {
    let output = Command::new("psql")
        .arg(url)
        .args(["-Atq", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .expect("running psql (PostgreSQL's client)");
    assert!(output.status.success(), "psql failed on {sql:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}
