//! The `subtask` command line: `subtask serve` runs the MCP server with the
//! demo tools; `call`, `get`, `watch`, `steer`, `pause`, `resume` and
//! `cancel` drive tasks from the client side (implemented in `cli/`).

mod cli;

/// mimalloc instead of the system allocator: handlers are spawned on one
/// worker and freed on another, and glibc's malloc serializes such frees on
/// its arena locks (cancelling a 100,000-task tree took about twice as long
/// with it; docs/architecture.md, "Allocator"). Build with
/// `--no-default-features` for the system allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use std::sync::Arc;

use clap::{Parser, Subcommand};
use subtask::runtime::{Runtime, RuntimeConfig};
use subtask::server::{ClusterConfig, Server, ServerConfig, ServerLimits, TokenTable, WorkerConfig};
use subtask::store::{
    Durability, Keyring, Membership, PostgresConfig, PostgresStore, Registration, SqliteConfig, SqliteStore,
    TaskStore,
};

/// subtask: hierarchical, long-running MCP tasks with subtasks, steering and pause/resume.
#[derive(Debug, Parser)]
#[command(name = "subtask", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the MCP server (Streamable HTTP at /mcp, or stdio) with the demo tools.
    Serve {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8750")]
        listen: SocketAddr,
        /// Token file: one `TOKEN PRINCIPAL` per line. Without it the server
        /// runs as one anonymous principal.
        #[arg(long)]
        tokens: Option<PathBuf>,
        /// Serve on stdin/stdout instead of HTTP.
        #[arg(long)]
        stdio: bool,
        /// Extra host names accepted in Host/Origin headers (loopback always is).
        #[arg(long = "allow-host")]
        allow_hosts: Vec<String>,
        /// Where tasks are kept: a SQLite file (created if missing), or a
        /// PostgreSQL database as `postgres://USER@HOST:PORT/DB`. Default:
        /// `subtask.db` in the working directory over HTTP; with --stdio,
        /// `subtask/subtask.db` in the per-user data directory
        /// (`$XDG_DATA_HOME`, else `~/.local/share`, on Linux), since hosts
        /// launch stdio servers from any directory.
        #[arg(long, conflicts_with = "memory")]
        db: Option<String>,
        /// Keep tasks in memory only: nothing survives a restart.
        #[arg(long)]
        memory: bool,
        /// `full`: fsync every group commit (survives power loss);
        /// `relaxed`: fsync at checkpoints, or PostgreSQL's
        /// `synchronous_commit = off` (survives a process crash only).
        #[arg(long, default_value = "full", value_parser = ["full", "relaxed"])]
        durability: String,
        /// With a SQLite --db: the most the database may grow to, in bytes
        /// or with a unit (`512MiB`, `2GiB`). When it is full, new work is
        /// refused with a clear error and reads go on, as on a full disk
        /// (docs/durability.md, "Full disk").
        #[arg(long = "db-max-size", value_parser = parse_size)]
        db_max_size: Option<u64>,
        /// With a PostgreSQL --db: this instance's id in the cluster of
        /// instances on that database (random when not given). A restart
        /// with the same id takes that id's trees back at once.
        #[arg(long = "instance-id")]
        instance_id: Option<uuid::Uuid>,
        /// With a PostgreSQL --db: the lease, in seconds. An instance that
        /// cannot renew it in time (a database outage, a stall) fences
        /// itself and rejoins the cluster once the database answers; the
        /// others take its trees over once it expires. It exits (status
        /// 75) only when another process registers with its id.
        #[arg(long, default_value_t = 5.0)]
        lease: f64,
        /// Seal task state at rest (docs/encryption.md) with the keys of
        /// this file: one `KEY_ID BASE64_32_BYTE_KEY` per line, `#`
        /// comments. The first key seals what is written; the others only
        /// open what older keys sealed. A key that does not fit the
        /// database is refused at start.
        #[arg(long = "encryption-keys", value_name = "FILE", conflicts_with = "memory")]
        encryption_keys: Option<PathBuf>,
        #[command(flatten)]
        limits: LimitArgs,
        // Boxed: `serve`'s flags would make every `Command` hundreds of bytes.
        #[command(flatten)]
        ops: Box<OpsArgs>,
        #[command(flatten)]
        otlp: cli::otlp::OtlpArgs,
    },
    /// Print the protocol surface this build implements.
    Info,
    /// Call a tool and print its result; a task is followed to its end
    /// (with --stream, every partial result of its tree, in order).
    Call(cli::CallArgs),
    /// Show a task, or its whole tree with --tree.
    Get(cli::GetArgs),
    /// Draw the live tree of a task until its root ends.
    Watch(cli::WatchArgs),
    /// Send feedback to a running task (delivered at its next safe point).
    Steer(cli::SteerArgs),
    /// Pause a task and its subtasks at their next safe point.
    Pause(cli::TaskArgs),
    /// Resume a paused task.
    Resume(cli::TaskArgs),
    /// Cancel a task and its subtasks.
    Cancel(cli::TaskArgs),
    /// Seal every stored value again with the first key of the key file
    /// (after a rotation, or to seal a database written in clear), so that
    /// the older keys can be taken out of the file (docs/encryption.md).
    /// A SQLite database must not be in use (stop the server); with
    /// PostgreSQL, every instance must already run with this key file.
    Reencrypt {
        /// The database: a SQLite file or `postgres://USER@HOST:PORT/DB`.
        #[arg(long)]
        db: String,
        /// The key file (as for `serve --encryption-keys`).
        #[arg(long = "encryption-keys", value_name = "FILE")]
        encryption_keys: PathBuf,
    },
}

fn main() -> ExitCode {
    // Before any reqwest client (the client commands', the OTLP exporter's,
    // the OAuth key fetcher's) is built: rustls's provider (`subtask::tls`).
    subtask::tls::install_provider();
    // Usage errors exit 3 (2 means "cancelled" for the client commands).
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(cli::EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    // Trace export is `serve`'s alone (docs/operations.md, "Traces"); it is
    // set up before the async runtime, whose threads must not own the
    // exporter's blocking HTTP client.
    let exporter = match &cli.command {
        Command::Serve { otlp, .. } => match cli::otlp::Exporter::from_args(otlp) {
            Ok(exporter) => exporter,
            Err(e) => {
                eprintln!("subtask: {e}");
                return ExitCode::from(cli::EXIT_USAGE);
            }
        },
        _ => None,
    };
    cli::otlp::init_tracing(exporter.as_ref());
    match cli.command {
        Command::Call(a) => cli::run(cli::Command::Call(a)),
        Command::Get(a) => cli::run(cli::Command::Get(a)),
        Command::Watch(a) => cli::run(cli::Command::Watch(a)),
        Command::Steer(a) => cli::run(cli::Command::Steer(a)),
        Command::Pause(a) => cli::run(cli::Command::Pause(a)),
        Command::Resume(a) => cli::run(cli::Command::Resume(a)),
        Command::Cancel(a) => cli::run(cli::Command::Cancel(a)),
        Command::Reencrypt { db, encryption_keys } => reencrypt(&db, &encryption_keys),
        Command::Info => {
            println!("subtask {}", env!("CARGO_PKG_VERSION"));
            println!("protocol: MCP 2026-07-28 (legacy initialize for 2025-11-25 and 2025-06-18)");
            println!(
                "extension: {} with subtasks, steer and pause (steer/pause shown to clients that declare them)",
                subtask::model::TASKS_EXTENSION
            );
            println!(
                "2025-11-25: task-augmented tools/call, tasks/get, tasks/result, tasks/list, tasks/cancel, subtasks"
            );
            ExitCode::SUCCESS
        }
        Command::Serve {
            listen,
            tokens,
            stdio,
            allow_hosts,
            db,
            memory,
            durability,
            db_max_size,
            instance_id,
            lease,
            encryption_keys,
            limits,
            ops,
            otlp: _,
        } => {
            if !(lease.is_finite() && (0.3..=3600.0).contains(&lease)) {
                eprintln!("subtask: --lease must be between 0.3 and 3600 seconds");
                return ExitCode::from(cli::EXIT_USAGE);
            }
            let lease = std::time::Duration::from_secs_f64(lease);
            let db = match db {
                Some(db) => db,
                None if stdio && !memory => match stdio_database() {
                    Ok(path) => path,
                    Err(e) => {
                        eprintln!("subtask: {e}; name a database with --db PATH (or use --memory)");
                        return ExitCode::from(3);
                    }
                },
                None => "subtask.db".to_owned(),
            };
            let postgres = db.starts_with("postgres://") || db.starts_with("postgresql://");
            if db_max_size.is_some() && (memory || postgres) {
                eprintln!("subtask: --db-max-size applies to a SQLite --db only");
                return ExitCode::from(cli::EXIT_USAGE);
            }
            let keys = match encryption_keys.as_deref().map(load_keys).transpose() {
                Ok(keys) => keys,
                Err(e) => {
                    eprintln!("subtask: {e}");
                    return ExitCode::from(cli::EXIT_USAGE);
                }
            };
            let store = if memory {
                None
            } else {
                let durability = match durability.as_str() {
                    "relaxed" => Durability::Relaxed,
                    _ => Durability::Full,
                };
                Some(
                    if db.starts_with("postgres://") || db.starts_with("postgresql://") {
                        StoreChoice::Postgres(PostgresConfig {
                            durability,
                            member: Some(Membership {
                                instance: instance_id.unwrap_or_else(uuid::Uuid::new_v4),
                                lease,
                            }),
                            keys,
                            ..PostgresConfig::new(db)
                        })
                    } else {
                        StoreChoice::Sqlite(SqliteConfig {
                            durability,
                            max_size: db_max_size,
                            keys,
                            ..SqliteConfig::new(db)
                        })
                    },
                )
            };
            let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("subtask: cannot start the async runtime: {e}");
                    return ExitCode::from(3);
                }
            };
            let served = rt.block_on(serve(listen, tokens, stdio, allow_hosts, store, limits, *ops));
            if let Some(exporter) = &exporter {
                // Every ended span still queued goes out before the exit.
                let flush = if matches!(served, Ok(Served::LostLease)) {
                    // Briefly: this process's handlers must not run on.
                    std::time::Duration::from_secs(1)
                } else {
                    // Handlers still running are dropped first, which ends
                    // their spans (without a final status), so they go too.
                    rt.shutdown_timeout(std::time::Duration::from_secs(2));
                    std::time::Duration::from_secs(5)
                };
                exporter.shutdown(flush);
            }
            match served {
                Ok(Served::Stopped) => ExitCode::SUCCESS,
                Ok(Served::LostLease) => {
                    eprintln!(
                        "subtask: another process registered with this instance's id and took its place; exiting"
                    );
                    // At once: nothing of this process may run on (its
                    // trees are another instance's), and dropping the async
                    // runtime would wait for its threads.
                    std::process::exit(75)
                }
                Err(e) => {
                    eprintln!("subtask: {e}");
                    ExitCode::from(3)
                }
            }
        }
    }
}

/// The key file of `--encryption-keys`, read and checked.
fn load_keys(path: &std::path::Path) -> Result<Arc<Keyring>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the key file {}: {e}", path.display()))?;
    Keyring::parse(&text)
        .map(Arc::new)
        .map_err(|e| format!("the key file {}: {e}", path.display()))
}

/// `subtask reencrypt`: every stored value sealed with the key file's
/// first key; the key ids no longer needed are printed.
fn reencrypt(db: &str, keys: &std::path::Path) -> ExitCode {
    let keys = match load_keys(keys) {
        Ok(keys) => keys,
        Err(e) => {
            eprintln!("subtask: {e}");
            return ExitCode::from(cli::EXIT_USAGE);
        }
    };
    let current = keys.current().to_owned();
    let done = if db.starts_with("postgres://") || db.starts_with("postgresql://") {
        PostgresStore::reencrypt(&PostgresConfig {
            keys: Some(keys),
            ..PostgresConfig::new(db)
        })
    } else {
        SqliteStore::reencrypt(db, &keys)
    };
    match done {
        Ok(done) => {
            println!(
                "sealed {} values again with key {current:?}; keys no longer needed: {}",
                done.values,
                if done.retired.is_empty() {
                    "none".to_owned()
                } else {
                    done.retired.join(", ")
                }
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            // (The error names the database; a URL's password never.)
            eprintln!("subtask: cannot re-encrypt the task database: {e}");
            ExitCode::from(3)
        }
    }
}

/// A size in bytes: a whole number with an optional unit (`K`/`KiB`,
/// `M`/`MiB`, `G`/`GiB`: powers of 1024; `B` or none: bytes).
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size (a whole number of bytes, or with KiB, MiB, GiB)"))?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" | "kb" => 1 << 10,
        "m" | "mib" | "mb" => 1 << 20,
        "g" | "gib" | "gb" => 1 << 30,
        other => return Err(format!("unknown size unit {other:?} (use KiB, MiB or GiB)")),
    };
    match n.checked_mul(scale) {
        Some(0) => Err("must be more than 0 bytes".to_owned()),
        Some(v) => Ok(v),
        None => Err(format!("{s:?} is too large")),
    }
}

/// The limits of `serve`: how much may run and live at once.
#[derive(Debug, clap::Args)]
struct LimitArgs {
    /// Handlers that may run at once across all trees. A handler parked at
    /// a safe point, awaiting input or a subtask, or inside
    /// `TaskContext::external` (a wait on a model or a remote service)
    /// holds no slot. Tasks beyond it queue and say so in their status message.
    #[arg(long = "max-running", default_value_t = RuntimeConfig::default().max_running, value_parser = positive)]
    max_running: usize,
    /// Handlers of one tree that may run at once, so one huge fan-out cannot
    /// take every slot.
    #[arg(long = "max-running-per-tree", default_value_t = RuntimeConfig::default().max_running_per_tree, value_parser = positive)]
    max_running_per_tree: usize,
    /// Non-terminal tasks one principal may own at once; a creation beyond
    /// it is refused with a clear error.
    #[arg(long = "max-live-per-principal", default_value_t = ServerLimits::default().max_live_tasks_per_principal, value_parser = positive)]
    max_live_per_principal: usize,
    /// Seconds a task created by `tools/call` is kept (its TTL) when its
    /// tool sets none; a finished tree is deleted a minute after it.
    #[arg(long = "task-ttl", value_name = "SECONDS", default_value_t = 3600, value_parser = positive)]
    task_ttl: usize,
    /// Seconds a finished tree stays in memory once it is durable: then the
    /// SQLite file or the PostgreSQL database answers for it until its
    /// deletion, so memory follows the live work (docs/durability.md,
    /// "Finished trees"). Without --db finished trees stay in memory until
    /// deleted.
    #[arg(long = "keep-finished", value_name = "SECONDS", default_value_t = 2)]
    keep_finished: u64,
}

/// A whole number of at least 1.
fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

impl LimitArgs {
    /// The runtime configuration these limits give.
    fn runtime(&self) -> RuntimeConfig {
        RuntimeConfig {
            max_running: self.max_running,
            max_running_per_tree: self.max_running_per_tree,
            release_finished_after: Some(std::time::Duration::from_secs(self.keep_finished)),
            ..RuntimeConfig::default()
        }
    }
}

/// What `serve` offers operators besides the MCP endpoint
/// (docs/operations.md).
#[derive(Debug, clap::Args)]
struct OpsArgs {
    /// Do not serve the web view at /ui.
    #[arg(long = "no-ui")]
    no_ui: bool,
    /// Do not serve Prometheus metrics at /metrics.
    #[arg(long = "no-metrics")]
    no_metrics: bool,
    /// Add the control tools a model in a host can call: task_status,
    /// task_wait, task_steer, task_pause, task_resume, task_cancel
    /// (docs/agents.md).
    #[arg(long = "agent-tools")]
    agent_tools: bool,
    /// Answer a task tool called by a client that asked for no task at once
    /// with the task's id, the task running on, for the model to follow with
    /// the control tools (implies --agent-tools).
    #[arg(long)]
    background: bool,
    /// On SIGTERM (or Ctrl-C), how long to wait, in seconds, for running
    /// handlers to reach their next safe point before exiting; their trees
    /// resume where they stopped on the next start (or, in a cluster, on
    /// another instance at once). A second signal exits at once.
    #[arg(long = "drain-timeout", default_value_t = 10.0)]
    drain_timeout: f64,
    /// Accept workers (tool handlers in Python, TypeScript or any language,
    /// docs/workers.md) at /workers with the tokens of this file: one
    /// `TOKEN NAME` per line. Worker tokens are not client tokens.
    #[arg(long = "worker-tokens")]
    worker_tokens: Option<PathBuf>,
    /// Accept workers at /workers with this token (repeatable; for a quick
    /// start, since a command line is visible to the machine's other users:
    /// prefer --worker-tokens).
    #[arg(long = "worker-token")]
    worker_token: Vec<String>,
    /// A worker's lease, in milliseconds: a worker silent for this long
    /// loses its tasks to another worker (it is asked to send a frame every
    /// fifth of it).
    #[arg(long = "worker-lease-ms", default_value_t = 10_000)]
    worker_lease_ms: u64,
    #[command(flatten)]
    oauth: OAuthArgs,
}

/// `serve` as an OAuth 2.1 resource server (docs/auth.md).
#[derive(Debug, clap::Args)]
struct OAuthArgs {
    /// Take JWT access tokens issued by this authorization server (its
    /// issuer identifier; repeatable). Its keys are found through its
    /// metadata. Needs --oauth-resource. With --tokens too, a static token
    /// is tried first.
    #[arg(long = "oauth-issuer")]
    oauth_issuer: Vec<String>,
    /// This server's resource URI, which a token's audience must name: the
    /// /mcp endpoint's URL as clients reach it (e.g.
    /// https://mcp.example.com/mcp).
    #[arg(long = "oauth-resource")]
    oauth_resource: Option<String>,
    /// The scope that lets a token call tools and read its own tasks.
    #[arg(long = "oauth-scope-tasks", default_value = "mcp:tasks")]
    oauth_scope_tasks: String,
    /// The scope that lets a token steer, pause, resume and cancel.
    #[arg(long = "oauth-scope-control", default_value = "mcp:control")]
    oauth_scope_control: String,
    /// The scope that lets a token open the web view and /metrics.
    #[arg(long = "oauth-scope-observe", default_value = "mcp:observe")]
    oauth_scope_observe: String,
    /// The web view signs in through the (first) authorization server as
    /// this public client (authorization code with PKCE; its redirect URI
    /// is /ui/callback at --oauth-resource's origin).
    #[arg(long = "oauth-ui-client", value_name = "CLIENT_ID")]
    oauth_ui_client: Option<String>,
}

impl OAuthArgs {
    /// The OAuth configuration, when issuers were given.
    fn config(&self) -> Result<Option<subtask::server::OAuthConfig>, String> {
        if self.oauth_issuer.is_empty() {
            return match self.oauth_resource {
                Some(_) => Err("--oauth-resource needs --oauth-issuer".to_owned()),
                None => Ok(None),
            };
        }
        let Some(resource) = &self.oauth_resource else {
            return Err(
                "--oauth-issuer needs --oauth-resource (this server's /mcp URL, which tokens must name)"
                    .to_owned(),
            );
        };
        for url in self.oauth_issuer.iter().chain([resource]) {
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                return Err(format!("{url:?} is not an http(s) URL"));
            }
        }
        let mut config = subtask::server::OAuthConfig::new(resource.clone(), self.oauth_issuer.clone());
        config.scopes = subtask::server::ScopeNames {
            tasks: self.oauth_scope_tasks.clone(),
            control: self.oauth_scope_control.clone(),
            observe: self.oauth_scope_observe.clone(),
        };
        config.ui_client = self.oauth_ui_client.clone();
        Ok(Some(config))
    }
}

impl OpsArgs {
    /// The workers' configuration, when worker tokens were given.
    fn workers(&self) -> Result<Option<WorkerConfig>, String> {
        let mut text = String::new();
        if let Some(path) = &self.worker_tokens {
            text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read worker token file {}: {e}", path.display()))?;
            text.push('\n');
        }
        for (n, token) in self.worker_token.iter().enumerate() {
            text.push_str(&format!("{token} worker-{}\n", n + 1));
        }
        if text.trim().is_empty() {
            return Ok(None);
        }
        let tokens = TokenTable::parse(&text).map_err(|e| format!("worker tokens: {e}"))?;
        let mut config = WorkerConfig::new(tokens);
        config.lease = std::time::Duration::from_millis(self.worker_lease_ms.max(100));
        Ok(Some(config))
    }
}

/// How `serve` ended.
enum Served {
    /// A shutdown signal.
    Stopped,
    /// Another process registered with this cluster instance's id (a
    /// lease lost otherwise is ridden out: the instance fences itself and
    /// rejoins): the process exits (status 75, `EX_TEMPFAIL`).
    LostLease,
}

/// A PostgreSQL cluster member's registration and cluster settings.
type Joining = (Registration, ClusterConfig);

/// The database of `serve --stdio` without `--db`: `subtask/subtask.db` in
/// the per-user data directory, which is created if needed. A host launches
/// a stdio server from a working directory that may be `/` or read-only.
fn stdio_database() -> Result<String, String> {
    let dir = dirs::data_dir()
        .ok_or("no per-user data directory (is HOME set?)")?
        .join("subtask");
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot create the data directory {}: {e}", dir.display()))?;
    let path = dir.join("subtask.db");
    let path = path
        .to_str()
        .ok_or_else(|| format!("the data directory {} is not valid UTF-8", dir.display()))?;
    tracing::info!(
        path,
        "tasks are kept in the per-user data directory (--db moves them)"
    );
    Ok(path.to_owned())
}

/// The store `--db` names.
enum StoreChoice {
    Sqlite(SqliteConfig),
    Postgres(PostgresConfig),
}

impl StoreChoice {
    /// Opens it (blocking: connects, migrates, starts the writer), with a
    /// PostgreSQL cluster member's registration and cluster settings.
    fn open(self) -> Result<(Arc<dyn TaskStore>, Option<Joining>), String> {
        match self {
            StoreChoice::Sqlite(cfg) => {
                let path = cfg.path.clone();
                SqliteStore::open(cfg)
                    .map(|s| (Arc::new(s) as Arc<dyn TaskStore>, None))
                    .map_err(|e| format!("cannot open the task database {}: {e}", path.display()))
            }
            StoreChoice::Postgres(cfg) => {
                // A fenced instance rejoins with a store opened as this one.
                let cluster = cfg.member.as_ref().map(|m| ClusterConfig {
                    store: cfg.clone(),
                    ..ClusterConfig::new(cfg.url.clone(), m.lease)
                });
                let store = PostgresStore::open(cfg)
                    .map_err(|e| format!("cannot open the PostgreSQL task database: {e}"))?;
                let joined = store.registration().cloned().zip(cluster);
                Ok((Arc::new(store) as Arc<dyn TaskStore>, joined))
            }
        }
    }
}

async fn serve(
    listen: SocketAddr,
    tokens: Option<PathBuf>,
    stdio: bool,
    allow_hosts: Vec<String>,
    store: Option<StoreChoice>,
    limits: LimitArgs,
    ops: OpsArgs,
) -> Result<Served, String> {
    let mut config = ServerConfig {
        allowed_hosts: allow_hosts,
        ui: !ops.no_ui,
        metrics: !ops.no_metrics,
        agent_tools: ops.agent_tools,
        background: ops.background,
        workers: ops.workers()?,
        oauth: ops.oauth.config()?,
        ..ServerConfig::default()
    };
    if stdio && config.oauth.is_some() {
        return Err("--oauth-issuer needs the HTTP listener: stdio has no bearer tokens".to_owned());
    }
    if let Some(o) = &config.oauth {
        tracing::info!(
            issuers = ?o.issuers,
            resource = %o.resource,
            metadata = %o.metadata_url(),
            "OAuth access tokens accepted; every task belongs to its token's issuer and subject"
        );
    }
    if stdio && config.workers.is_some() {
        return Err(
            "--worker-token/--worker-tokens need the HTTP listener: workers connect to /workers, which --stdio does not serve"
                .to_owned(),
        );
    }
    if let Some(w) = &config.workers {
        tracing::info!(
            tokens = w.tokens.len(),
            lease_ms = w.lease.as_millis() as u64,
            "workers accepted at /workers (docs/workers.md)"
        );
    }
    config.limits.max_live_tasks_per_principal = limits.max_live_per_principal;
    config.default_task_ttl_ms = Some(limits.task_ttl as u64 * 1000);
    match tokens {
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read token file {}: {e}", path.display()))?;
            let table = TokenTable::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            tracing::info!(
                tokens = table.len(),
                "bearer tokens loaded; every task belongs to its principal"
            );
            config.tokens = Some(table);
        }
        None if config.oauth.is_some() => {}
        None => tracing::warn!(
            "no --tokens file: the server runs as one anonymous principal (anyone who can reach it sees every task)"
        ),
    }
    let mut membership = None;
    let runtime = match store {
        None => {
            tracing::warn!("--memory: tasks are kept in memory only and are lost when the server stops");
            Runtime::new(limits.runtime())
        }
        Some(choice) => {
            let (store, member) = tokio::task::spawn_blocking(move || choice.open())
                .await
                .map_err(|e| e.to_string())??;
            tracing::info!(store = %store.describe(), "tasks are durable");
            let runtime = Runtime::with_store(limits.runtime(), store);
            if let Some((registration, _)) = &member {
                // Before recovery starts any handler: none runs past the lease.
                runtime.set_lease(registration.gate.clone());
            }
            membership = member;
            runtime
        }
    };
    let server = subtask::demo::register(Server::builder(runtime, config)).build();
    let report = server
        .recover()
        .await
        .map_err(|e| format!("cannot recover the stored tasks: {e}"))?;
    if report.trees > 0 {
        tracing::info!(%report, "recovered stored tasks");
    }
    let cluster = match &membership {
        Some((registration, config)) => Some(
            server
                .join_cluster(registration, config.clone())
                .map_err(|e| format!("cannot join the cluster: {e}"))?,
        ),
        None => None,
    };
    let leaving = cluster.clone();
    let lost = async move {
        match &cluster {
            Some(c) => c.lost().await,
            None => std::future::pending().await,
        }
    };
    let drain_for = std::time::Duration::from_secs_f64(ops.drain_timeout.max(0.0));
    let drainer = server.clone();
    let drain = move || async move {
        // The incarnation serving now (a cluster instance that lost its
        // lease and rejoined runs a new runtime).
        let report = drainer.current().runtime().drain(drain_for).await;
        tracing::info!(
            busy = report.busy,
            ms = report.elapsed.as_millis() as u64,
            durable = report.durable,
            "drained: running handlers stopped at their safe points"
        );
    };
    if stdio {
        tracing::info!("serving MCP on stdio");
        let served = tokio::select! {
            r = subtask::server::stdio::serve_stdio(server) => r.map(|()| Served::Stopped).map_err(|e| format!("stdio: {e}")),
            () = lost => return Ok(Served::LostLease),
        };
        // The host closed the connection: stop at the safe points, as on SIGTERM.
        drain().await;
        return served;
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!("subtask listening on http://{addr}/mcp");
    if server.config().ui {
        tracing::info!("web view at http://{addr}/ui");
    }
    if server.config().metrics {
        tracing::info!("metrics at http://{addr}/metrics");
    }
    // SIGTERM drains first (the server keeps answering meanwhile; new tasks
    // are refused), then stops taking connections. A second signal exits.
    let shutdown = async move {
        subtask::server::http::shutdown_signal().await;
        tokio::spawn(async {
            subtask::server::http::shutdown_signal().await;
            eprintln!("subtask: a second shutdown signal: exiting at once");
            std::process::exit(130);
        });
        drain().await;
    };
    tokio::select! {
        r = subtask::server::http::serve(server, listener, shutdown) => {
            r.map_err(|e| format!("http: {e}"))?;
        }
        // No graceful drain: the trees are another instance's now.
        () = lost => return Ok(Served::LostLease),
    }
    if let Some(c) = leaving {
        c.leave().await;
    }
    tracing::info!("shut down cleanly");
    Ok(Served::Stopped)
}
