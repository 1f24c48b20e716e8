//! The `warden` binary: argument parsing and the real Env. Everything else is the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "warden", version, about = "A crash-safe MCP tool server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How log lines (stderr) are written: text, or one JSON object a line (the exit line
    /// too). `RUST_LOG` filters them by level (error, warn, info (the default), debug).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "WARDEN_LOG_FORMAT")]
    log_format: LogFormat,
    /// Export traces (a span per call, continuing the caller's `traceparent`, with its run,
    /// actions, durable writes and model calls) over OTLP/HTTP to this base URL, such as
    /// http://127.0.0.1:4318. Without it, `OTEL_EXPORTER_OTLP_ENDPOINT` is used; neither: off.
    #[arg(long, global = true, value_name = "URL")]
    otlp_endpoint: Option<String>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the manifest's tools over stdio (MCP 2025-11-25 and 2026-07-28).
    ///
    /// SIGTERM, SIGINT or SIGHUP drains: no new call, runs stop between actions, exit 0 within
    /// `server.shutdown_grace` (a second signal exits at once).
    #[command(args_conflicts_with_subcommands = true)]
    Mcp {
        /// The manifest (JSON).
        manifest: Option<PathBuf>,
        /// Serve Prometheus metrics at http://ADDRESS/metrics (a loopback address such as
        /// 127.0.0.1:9464: served without authentication).
        #[arg(long, value_name = "ADDRESS")]
        metrics_listen: Option<core::net::SocketAddr>,
        #[command(subcommand)]
        command: Option<McpCommand>,
    },
    /// Serve the manifest's tools over Streamable HTTP on `/mcp` (MCP 2025-11-25 sessions and
    /// 2026-07-28 requests).
    ///
    /// `/healthz` and `/readyz` answer a supervisor's probes. SIGTERM, SIGINT or SIGHUP drains
    /// (new requests get 503), as for `mcp`.
    ServeHttp(ServeHttpArgs),
    /// Check a manifest and its programs without serving anything: every problem at once
    /// (fields, programs, secrets, warden.lock), each naming its file and field.
    Check {
        manifest: PathBuf,
        /// Tell unset secrets without failing (to lint a manifest in CI, where its secrets
        /// are not set).
        #[arg(long)]
        without_secrets: bool,
    },
    /// Print the tools' schemas as `tools/list` gives them.
    Schema { manifest: PathBuf, tool: Option<String> },
    /// Pin the tools: write `warden.lock` beside the manifest with a digest of each tool's
    /// name, description and schemas. `warden mcp` then refuses to start when one changed.
    Lock { manifest: PathBuf },
    /// Print a completion script for bash, zsh or fish.
    ///
    /// Install it where the shell reads them: `warden completions bash >
    /// /etc/bash_completion.d/warden`; zsh into a directory on `$fpath` as `_warden`; fish into
    /// `~/.config/fish/completions/warden.fish`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff).
    ///
    /// Install it as `warden.1`: `warden man > /usr/local/share/man/man1/warden.1`, then `man
    /// warden`; or one page a command with `--dir`.
    Man {
        /// Write one page a command into this directory instead (`warden.1`, `warden-mcp.1`,
        /// `warden-runs-show.1`...), for `man warden-runs-show`.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Create or migrate the schema of the PostgreSQL store the manifest names
    /// (`server.store.postgres`, for state several instances share). Safe to run again, and
    /// beside other instances; refuses a database a newer warden migrated.
    Migrate {
        /// The manifest (JSON).
        manifest: PathBuf,
    },
    /// List runs, or show one run's actions and answer, read from the ledger and the journals
    /// (beside a running server too).
    Runs {
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// A read-only page over the runs: those waiting for a person on top (each action shown
    /// whole, with the command that decides it), then every run with filters, and each run's
    /// page.
    ///
    /// Served on a loopback address only, without authentication, beside a running server or
    /// without one; nothing on the page acts. SIGTERM or Ctrl-C stops it.
    Console {
        /// The manifest (JSON).
        manifest: PathBuf,
        /// Where to serve the page: a loopback address.
        #[arg(long, value_name = "ADDRESS", default_value = "127.0.0.1:8470")]
        listen: core::net::SocketAddr,
    },
    /// Act on `once` keys: release the key an ended run holds.
    Once {
        #[command(subcommand)]
        command: OnceCommand,
    },
    #[command(flatten)]
    Hidden(Hidden),
    /// Settle an action in doubt of a run waiting for an operator, or resume a halted run.
    ///
    /// `warden resolve <manifest> <run> --op N --happened '<json>'` (or `--did-not-happen`),
    /// from any directory: the run by its id or its first 6 or more characters. It shows the
    /// action whole (target, amount, key, the run's arguments, why it is in doubt) and, on a
    /// terminal, asks before recording (`--yes` for scripts). The word keeps who gave it (the
    /// account, and `--note`), shown by `warden runs show`.
    ///
    /// Beside a running server, the word goes to it through its admin channel (the socket
    /// `server.admin` in the journals directory, for the server's own account only), and the
    /// server resumes the run at once; with no server running, it is written to the run's
    /// journal and the next start resumes the run.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["run", "journal"])))]
    #[command(override_usage = "warden resolve <MANIFEST> <RUN> --op <N> (--happened '<JSON>' | --did-not-happen) \
                                [--note <TEXT>] [--yes]\n       warden resolve <MANIFEST> <RUN> --resume\n       \
                                warden resolve --journal <JOURNAL> (--op <N> ... | --resume)")]
    Resolve {
        /// The manifest (JSON) of the server the run belongs to.
        #[arg(requires = "run")]
        manifest: Option<PathBuf>,
        /// The run id, or its first 6 or more characters (`warden mcp status` names it).
        #[arg(requires = "manifest")]
        run: Option<String>,
        /// The run's journal instead of the manifest and the run (the older form).
        #[arg(long, conflicts_with_all = ["manifest", "run"])]
        journal: Option<PathBuf>,
        /// Record it without asking, even on a terminal (for scripts).
        #[arg(long)]
        yes: bool,
        /// Why you decided so (kept in the run's journal with your account; at most 500
        /// characters), such as "refund re_123 in the Stripe dashboard".
        #[arg(long)]
        note: Option<String>,
        /// The action number in doubt.
        #[arg(long, required_unless_present = "resume")]
        op: Option<u64>,
        /// It happened; its result, as JSON (what the service's own records show), in the
        /// shape the program reads for the action's kind: for an HTTP action (net.http.*)
        /// {"status": 100-599, "json": <the response's JSON>}, with "body" (text) and
        /// "headers" optional; for a Stripe refund the same, its "json" Stripe's refund object
        /// (id, amount, currency, status); for a database write (db.sqlite, db.postgres)
        /// {"changes": N}, with "rows" optional. `warden mcp status` shows a filled-in example
        /// for each waiting run.
        #[arg(long, conflicts_with = "did_not_happen", required_unless_present_any = ["did_not_happen", "resume"])]
        happened: Option<String>,
        /// It did not happen: the resumed run may perform it again.
        #[arg(long)]
        did_not_happen: bool,
        /// A halted run (found unfinished at starts in a row without getting further): resume
        /// it again at the next start.
        #[arg(long, conflicts_with_all = ["op", "happened", "did_not_happen"])]
        resume: bool,
    },
}

/// `warden serve-http`'s arguments.
#[derive(clap::Args)]
struct ServeHttpArgs {
    /// The manifest (JSON).
    manifest: PathBuf,
    /// The address to listen on, such as 127.0.0.1:8080 (port 0 picks a free one; the
    /// address bound is logged). Beyond loopback, a bearer token is required.
    #[arg(long)]
    listen: core::net::SocketAddr,
    /// The environment variable holding the bearer token every request must carry
    /// (`Authorization: Bearer <token>`, at least 16 bytes).
    #[arg(long, conflicts_with_all = ["oauth_issuer", "oauth_audience", "oauth_jwks_file", "oauth_jwks_url"])]
    bearer_token_env: Option<String>,
    /// OAuth 2.1: the authorization server whose access tokens (JWTs) are accepted.
    #[arg(long, requires = "oauth_audience")]
    oauth_issuer: Option<String>,
    /// OAuth 2.1: this server's resource URL, ending in /mcp (the tokens' audience).
    #[arg(long, requires = "oauth_issuer")]
    oauth_audience: Option<String>,
    /// OAuth 2.1: the issuer's public keys, a JWKS file.
    #[arg(long, requires = "oauth_issuer", conflicts_with = "oauth_jwks_url")]
    oauth_jwks_file: Option<PathBuf>,
    /// OAuth 2.1: the issuer's public keys, fetched from this URL at start and hourly.
    #[arg(long, requires = "oauth_issuer")]
    oauth_jwks_url: Option<String>,
    /// Also serve Prometheus metrics at http://ADDRESS/metrics, without authentication (a
    /// loopback address such as 127.0.0.1:9464). Without OAuth, `/metrics` on the main
    /// listener serves them too, behind its bearer token.
    #[arg(long, value_name = "ADDRESS")]
    metrics_listen: Option<core::net::SocketAddr>,
}

#[derive(Subcommand)]
enum Hidden {
    /// A worker: runs one program execution from stdin, its reply to stdout (the server
    /// starts these; see `program::job`).
    #[command(name = "exec-program", hide = true)]
    ExecProgram,
}

#[derive(Subcommand)]
enum RunsCommand {
    /// The runs the ledger holds, newest first: run id, tool, state, when reserved, how long
    /// it took, for whom.
    ///
    /// States: running, waiting_for_operator, halted, waiting_for_input, interrupted (no server
    /// runs it: the next start resumes it), done, failed, released (never started).
    List {
        /// The manifest (JSON).
        manifest: PathBuf,
        /// Only this tool's runs.
        #[arg(long)]
        tool: Option<String>,
        /// Only runs in this state (e.g. waiting_for_operator).
        #[arg(long)]
        state: Option<String>,
        /// Only runs reserved within this long, such as 90s, 15m, 3h or 2d.
        #[arg(long)]
        since: Option<String>,
        /// Only runs whose journal, kept arguments or waiting record hold this text, ignoring
        /// case (an order id, a payment intent, a word of the answer); the newest 2000 runs
        /// the other filters pass are searched.
        #[arg(long)]
        text: Option<String>,
        /// At most this many runs (1 to 10000).
        #[arg(long, default_value_t = warden::operator::runs::LIST_LIMIT_DEFAULT)]
        limit: usize,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// End a run as cancelled: one waiting for its client's input, interrupted between
    /// actions, or halted before its next action. Nothing further is sent, and what it did is
    /// charged. A run with an action in doubt needs the action decided first (`warden
    /// resolve`). The running server that owns the run does it, through its admin channel.
    Cancel {
        /// The manifest (JSON).
        manifest: PathBuf,
        /// The run id (or its first 6 or more characters).
        run: String,
        /// Why (kept in the run's journal with your account; at most 500 characters).
        #[arg(long)]
        note: Option<String>,
    },
    /// One run: when it was reserved, started, resumed and settled; each action with its kind,
    /// target, result or error and duration; its prints; the answer its client got.
    Show {
        /// The manifest (JSON).
        manifest: PathBuf,
        /// The run id (or its first 6 or more characters), as `warden runs list` names it.
        run: String,
        /// JSON instead of text, each result whole.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum OnceCommand {
    /// Forget the `once` key of an ended run, so a corrected call with the same key runs.
    ///
    /// A run that ended (done, failed, cancelled) holds its key for the tool's `once.keep`,
    /// and a repeat is answered with its outcome: a run that failed on one bad argument
    /// answers the corrected call with that failure. Released, the key is forgotten as a
    /// ledger event (with your account); the run keeps its charges. A run still in progress is
    /// refused. The running server does it, through its admin channel (on the PostgreSQL
    /// store, any instance serving it).
    Release {
        /// The manifest (JSON).
        manifest: PathBuf,
        /// The tool whose run holds the key.
        tool: String,
        /// The run id (or its first 6 or more characters), as `warden runs list` names it.
        run: String,
    },
}

#[derive(Subcommand)]
enum McpCommand {
    /// Whether a server is running, each unfinished run (what it is doing and the one thing to
    /// do) and each tool's quota use; safe beside a running server.
    Status {
        /// The manifest (JSON).
        manifest: PathBuf,
        /// JSON instead of text (for monitoring and scripts).
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Held to the end: dropped, the trace exporter sends what it still holds.
    let mut _exporting = None;
    if !matches!(cli.command, Command::Hidden(_)) {
        let format = match cli.log_format {
            LogFormat::Text => warden::io::log::LogFormat::Text,
            LogFormat::Json => warden::io::log::LogFormat::Json,
        };
        match warden::io::log::init(format, cli.otlp_endpoint.as_deref()) {
            Ok(exporting) => _exporting = exporting,
            Err(problem) => {
                eprintln!("warden: {problem}");
                return ExitCode::from(2);
            }
        }
    }
    match cli.command {
        Command::Mcp { command: Some(McpCommand::Status { manifest, json }), .. } => {
            let env = warden::io::command_env();
            report(warden::io::run(warden::commands::status(&env, &manifest, json)))
        }
        Command::Mcp { manifest: None, command: None, .. } => {
            eprintln!("warden: usage: warden mcp <manifest.json> | warden mcp status <manifest.json>");
            ExitCode::from(2)
        }
        Command::Mcp { manifest: Some(manifest), metrics_listen, .. } => serve_stdio(&manifest, metrics_listen),
        Command::ServeHttp(args) => serve_http(args),
        Command::Check { manifest, without_secrets } => {
            let env = warden::io::command_env();
            report(warden::io::run(warden::commands::check(&env, &manifest, without_secrets)))
        }
        Command::Resolve { manifest, run, journal, yes, note, op, happened, did_not_happen: _, resume } => {
            let which = match (journal, manifest, run) {
                (Some(journal), _, _) => Which::Journal(journal),
                (None, Some(manifest), Some(run)) => Which::Run(manifest, run),
                _ => unreachable!("clap requires the manifest and the run, or --journal"),
            };
            resolve(which, Decision { op, happened, resume, yes, note })
        }
        Command::Runs { command } => runs(command),
        Command::Once { command } => once(command),
        Command::Console { manifest, listen } => {
            let env = warden::io::command_env();
            report(warden::io::run(warden::commands::console(&env, &manifest, listen)).map(|()| String::new()))
        }
        Command::Hidden(Hidden::ExecProgram) => match warden::io::sandbox::worker_main() {
            Ok(()) => ExitCode::SUCCESS,
            Err(problem) => {
                eprintln!("warden exec-program: {problem}");
                ExitCode::from(1)
            }
        },
        Command::Migrate { manifest } => {
            let env = warden::io::command_env();
            report(warden::io::run(warden::commands::migrate(&env, &manifest)))
        }
        Command::Lock { manifest } => {
            let env = warden::io::command_env();
            report(warden::io::run(warden::commands::lock(&env, &manifest)))
        }
        Command::Completions { shell } => completions(shell),
        Command::Man { dir } => man_page(dir),
        Command::Schema { manifest, tool } => {
            let env = warden::io::command_env();
            report(warden::io::run(warden::commands::schema(&env, &manifest, tool.as_deref())))
        }
    }
}

/// Which run `warden resolve` decides for.
enum Which {
    Journal(PathBuf),
    Run(PathBuf, String),
}

/// What `warden resolve` was told to record.
struct Decision {
    op: Option<u64>,
    happened: Option<String>,
    resume: bool,
    yes: bool,
    note: Option<String>,
}

/// `warden resolve`: the action shown whole, confirmed on a terminal, then recorded with who
/// gave the word (the account the command runs as).
fn resolve(which: Which, decision: Decision) -> ExitCode {
    let env = warden::io::command_env();
    let (journal, shown) = match which {
        Which::Journal(journal) => {
            let shown = warden::io::run(warden::operator::in_doubt::shown_from_journal(&env, &journal));
            (journal, shown)
        }
        Which::Run(manifest, run) => match warden::io::run(warden::commands::waiting_run(&env, &manifest, &run)) {
            Ok((journal, shown)) => (journal, Some(shown)),
            Err(problem) => return report(Err(problem)),
        },
    };
    if let Some(shown) = &shown {
        println!("the run waits for this decision:\n{shown}");
    }
    let verdict = match (&decision.happened, decision.resume) {
        (_, true) => "resume the halted run".to_string(),
        (Some(_), false) => format!("record action {} as happened", decision.op.unwrap_or(0)),
        (None, false) => {
            format!("record action {} as not happened (it may be performed again)", decision.op.unwrap_or(0))
        }
    };
    if !decision.yes && warden::io::confirm(&format!("{verdict}? [y/N] ")) == Some(false) {
        eprintln!("warden: nothing was recorded");
        return ExitCode::from(1);
    }
    let by = match operator_word(decision.note.as_deref()) {
        Ok(by) => by,
        Err(problem) => return report(Err(problem)),
    };
    match (decision.resume, decision.op) {
        (true, _) => report(warden::io::run(warden::commands::resume_halted(&env, &journal))),
        (false, Some(op)) => report(warden::io::run(warden::commands::resolve(
            &env,
            &journal,
            op,
            decision.happened.as_deref(),
            Some(&by),
        ))),
        (false, None) => unreachable!("clap requires --op without --resume"),
    }
}

/// `warden mcp MANIFEST`: the protocol on stdio, protected from stray writes first.
fn serve_stdio(manifest: &std::path::Path, metrics_listen: Option<core::net::SocketAddr>) -> ExitCode {
    // Before anything else (the manifest included) can write to stdout.
    let stdio = match warden::io::protect_stdio() {
        Ok(stdio) => stdio,
        Err(error) => {
            eprintln!("warden: cannot protect the protocol stream: {error}");
            return ExitCode::from(2);
        }
    };
    if std::env::var_os(SELF_TEST_STDOUT).is_some() {
        write_to_stdout_as_a_stray_library_would();
    }
    let env = warden::io::real_env(stdio);
    report_served(&env, warden::io::run(warden::commands::serve_mcp(&env, manifest, metrics_listen)))
}

/// `warden serve-http`: the options checked beyond what clap knows, then the server.
fn serve_http(args: ServeHttpArgs) -> ExitCode {
    let ServeHttpArgs {
        manifest,
        listen,
        bearer_token_env,
        oauth_issuer,
        oauth_audience,
        oauth_jwks_file,
        oauth_jwks_url,
        metrics_listen,
    } = args;
    let env = warden::io::command_env();
    let keys = match (oauth_jwks_file, oauth_jwks_url) {
        (Some(file), _) => Some(warden::protocol::oauth::KeySource::File(file)),
        (None, Some(url)) => Some(warden::protocol::oauth::KeySource::Url(url)),
        (None, None) => None,
    };
    let oauth = match (oauth_issuer, oauth_audience, keys) {
        (Some(issuer), Some(audience), Some(keys)) => {
            Some(warden::protocol::http::OAuthOptions { issuer, audience, keys })
        }
        (Some(_), _, None) => {
            eprintln!("warden: --oauth-issuer needs --oauth-jwks-file or --oauth-jwks-url");
            return ExitCode::from(2);
        }
        _ => None,
    };
    let options = warden::protocol::http::HttpOptions { listen, bearer_token_env, oauth, metrics_listen };
    report_served(&env, warden::io::run(warden::commands::serve_http(&env, &manifest, options)))
}

/// `warden runs list | show`.
fn runs(command: RunsCommand) -> ExitCode {
    let env = warden::io::command_env();
    match command {
        RunsCommand::List { manifest, tool, state, since, text, limit, json } => {
            let filter =
                match warden::operator::runs::Filter::parse(tool, state.as_deref(), since.as_deref(), text, limit) {
                    Ok(filter) => filter,
                    Err(problem) => return report(Err(problem)),
                };
            report(warden::io::run(warden::commands::runs_list(&env, &manifest, &filter, json)))
        }
        RunsCommand::Show { manifest, run, json } => {
            report(warden::io::run(warden::commands::runs_show(&env, &manifest, &run, json)))
        }
        RunsCommand::Cancel { manifest, run, note } => match operator_word(note.as_deref()) {
            Ok(by) => report(warden::io::run(warden::commands::cancel_run(&env, &manifest, &run, &by))),
            Err(problem) => report(Err(problem)),
        },
    }
}

/// `warden once ...`.
fn once(command: OnceCommand) -> ExitCode {
    let OnceCommand::Release { manifest, tool, run } = command;
    match operator_word(None) {
        Ok(by) => {
            let env = warden::io::command_env();
            report(warden::io::run(warden::commands::release_once(&env, &manifest, &tool, &run, &by.account)))
        }
        Err(problem) => report(Err(problem)),
    }
}

/// Who gives an operator's word: the account the command runs as, and its note.
fn operator_word(note: Option<&str>) -> Result<warden::store::journal::Word, String> {
    let account = std::env::var("USER").or_else(|_| std::env::var("LOGNAME")).ok();
    warden::operator::verdict::word(account.as_deref(), note)
}

/// `warden completions <shell>`: the script on stdout.
fn completions(shell: clap_complete::Shell) -> ExitCode {
    let mut command = <Cli as clap::CommandFactory>::command();
    clap_complete::generate(shell, &mut command, "warden", &mut std::io::stdout());
    ExitCode::SUCCESS
}

/// `warden man`: the manual page on stdout, or with `--dir` one page a command written there
/// (`warden.1`, `warden-mcp.1`, `warden-runs-show.1`...).
fn man_page(dir: Option<PathBuf>) -> ExitCode {
    let command = <Cli as clap::CommandFactory>::command();
    let written = match dir {
        Some(dir) => clap_mangen::generate_to(command, &dir),
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(command)
                .render(&mut page)
                .and_then(|()| std::io::Write::write_all(&mut std::io::stdout(), &page))
        }
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(problem) => {
            eprintln!("warden man: {problem}");
            ExitCode::from(1)
        }
    }
}

/// Set by the stream-protection test: the process writes to its standard output the way a
/// stray print or a C library would, after the protocol stream was protected.
const SELF_TEST_STDOUT: &str = "WARDEN_SELF_TEST_STDOUT";

fn write_to_stdout_as_a_stray_library_would() {
    println!("stray line from println! (must land on stderr)");
    let raw = b"stray line from write(1, ...) (must land on stderr)\n";
    // SAFETY: writes a static buffer to fd 1, as a C library would.
    unsafe { libc::write(1, raw.as_ptr().cast(), raw.len()) };
}

/// How a server ended: its exit line written as its log's lines are (JSON in JSON logs),
/// scrubbed of its secrets.
fn report_served(env: &warden::env::Env, outcome: Result<(), String>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(problems) => {
            for line in problems.lines() {
                warden::io::log::exit_line(&env.log_secrets.scrub(line));
            }
            ExitCode::from(1)
        }
    }
}

fn report(outcome: Result<String, String>) -> ExitCode {
    match outcome {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(problems) => {
            for line in problems.lines() {
                eprintln!("warden: {line}");
            }
            ExitCode::from(1)
        }
    }
}
