//! The servers measured: subtask, the rmcp peer and the bare axum floor, each on a runtime of its own.

#[allow(unused_imports)]
use super::*;

/// A server on a tokio runtime of its own (2 workers, threads named
/// `threads`), listening on a free loopback port.
pub(crate) struct Host {
    pub(crate) rt: Option<tokio::runtime::Runtime>,
    pub(crate) addr: SocketAddr,
    /// Name prefixes of the threads whose CPU is this server's.
    pub(crate) threads: Vec<&'static str>,
    pub(crate) shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Host {
    pub(crate) fn cpu(&self) -> Duration {
        threads_cpu(&self.threads)
    }

    pub(crate) fn ticks(&self) -> (u64, u64) {
        threads_ticks(&self.threads)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(10));
        }
    }
}

pub(crate) fn server_runtime(threads: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(threads)
        .enable_all()
        .build()
        .expect("a server runtime")
}

/// Serves `app` (an axum router) on the host's runtime.
pub(crate) fn host_router(
    rt: tokio::runtime::Runtime,
    threads: Vec<&'static str>,
    app: impl FnOnce() -> axum::Router,
) -> Host {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let addr = rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let app = app();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await
                .expect("serve");
        });
        addr
    });
    Host {
        rt: Some(rt),
        addr,
        threads,
        shutdown: Some(tx),
    }
}

pub(crate) enum Store {
    Memory,
    Sqlite(std::path::PathBuf),
    /// A PostgreSQL database's URL: the store opened as `subtask serve
    /// --db postgres://…` opens it (a cluster member of one instance).
    Postgres(String),
}

/// The lease of the PostgreSQL rounds' instance: `subtask serve`'s default.
const PG_LEASE: Duration = Duration::from_secs(5);

/// subtask's server as `subtask serve` runs it (`subtask::server::http::serve`)
/// with two tools: `quick` (a task that completes at once) and `park` (a
/// task that waits until cancelled).
pub(crate) fn start_subtask(store: &Store) -> Host {
    start_subtask_with(store, None)
}

/// [`start_subtask`], taking OAuth access tokens when `oauth` is given
/// (`jwt.rs`).
pub(crate) fn start_subtask_with(store: &Store, oauth: Option<subtask::server::OAuthConfig>) -> Host {
    let rt = server_runtime(SUBTASK_THREADS);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let mut threads = vec![SUBTASK_THREADS];
    // Opened outside the server's runtime: the PostgreSQL store's
    // synchronous client runs a runtime of its own.
    let mut member = None;
    let opened: Option<Arc<dyn subtask::store::TaskStore>> = match store {
        Store::Memory => None,
        Store::Sqlite(path) => Some(Arc::new(
            SqliteStore::open(SqliteConfig::new(path)).expect("open the SQLite store"),
        )),
        Store::Postgres(url) => {
            let config = PostgresConfig {
                member: Some(Membership {
                    instance: uuid::Uuid::new_v4(),
                    lease: PG_LEASE,
                }),
                ..PostgresConfig::new(url.clone())
            };
            let cluster = ClusterConfig {
                store: config.clone(),
                ..ClusterConfig::new(url.clone(), PG_LEASE)
            };
            let store = PostgresStore::open(config).expect("open the PostgreSQL store");
            member = Some((
                store
                    .registration()
                    .cloned()
                    .expect("a cluster member's registration"),
                cluster,
            ));
            Some(Arc::new(store))
        }
    };
    let addr = rt.block_on(async {
        // As `subtask serve` runs: finished trees leave memory after 2 s
        // (`--keep-finished`; with SQLite only, which answers for them).
        // `SUBTASK_HTTP_KEEP_FINISHED=off` keeps them until their TTL, as
        // before issue 27, to tell that work apart in a comparison.
        let release_finished_after = match std::env::var("SUBTASK_HTTP_KEEP_FINISHED").as_deref() {
            Ok("off") => None,
            Ok(s) => Some(Duration::from_secs(
                s.parse().expect("SUBTASK_HTTP_KEEP_FINISHED: seconds or off"),
            )),
            Err(_) => Some(Duration::from_secs(2)),
        };
        let config = RuntimeConfig {
            release_finished_after,
            ..RuntimeConfig::default()
        };
        let runtime = match opened {
            None => Runtime::new(config),
            Some(store) => Runtime::with_store(config, store),
        };
        if let Some((registration, _)) = &member {
            // As `subtask serve`: before recovery starts any handler.
            runtime.set_lease(registration.gate.clone());
        }
        let server_config = ServerConfig {
            limits: ServerLimits {
                max_live_tasks_per_principal: LIVE_LIMIT,
                ..ServerLimits::default()
            },
            default_task_ttl_ms: Some(TTL_MS),
            // The bench's worker (`workers_overhead`) connects with it.
            workers: Some(WorkerConfig::new(
                subtask::server::TokenTable::parse(&format!("{WORKER_TOKEN} bench")).expect("a token line"),
            )),
            oauth,
            ..ServerConfig::default()
        };
        let schema = serde_json::json!({"type": "object"});
        let server =
            Server::builder(runtime, server_config)
                .tool(
                    ToolSpec::new(
                        "quick",
                        "A task that completes at once.",
                        schema.clone(),
                        TaskSupport::Required,
                    ),
                    |_call: ToolCall| async move {
                        ToolOutcome::task(|_ctx| async move { Ok(text_result("ok")) })
                    },
                )
                .tool(
                    ToolSpec::new(
                        "park",
                        "A task that waits until it is cancelled.",
                        schema,
                        TaskSupport::Required,
                    ),
                    |_call: ToolCall| async move {
                        ToolOutcome::task(|ctx| async move {
                            // Waiting outside the runtime: the slot goes back.
                            ctx.external(ctx.cancelled()).await;
                            Err(TaskError::Interrupted.into())
                        })
                    },
                )
                .build();
        server.recover().await.expect("recover (an empty store)");
        // As `subtask serve --db postgres://…`: the instance joins the
        // cluster (lease renewal, the tree listener), held while it serves.
        let cluster = member.map(|(registration, config)| {
            server
                .join_cluster(&registration, config)
                .expect("join the cluster")
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        tokio::spawn(async move {
            let _cluster = cluster;
            subtask::server::http::serve(server, listener, async move {
                let _ = rx.await;
            })
            .await
            .expect("serve");
        });
        addr
    });
    match store {
        Store::Memory => {}
        Store::Sqlite(_) => threads.extend(["subtask-store", "subtask-sync"]),
        // The store's writer, the lease and the tree listener (`subtask-pg`,
        // `subtask-lease`, `subtask-listen`, …).
        Store::Postgres(_) => threads.push("subtask-"),
    }
    Host {
        rt: Some(rt),
        addr,
        threads,
        shutdown: Some(tx),
    }
}

/// The peer: rmcp 3.11's Streamable HTTP server with a handler whose task
/// tools are backed by rmcp's `TaskManager`, wired as rmcp's own task
/// example (`tests/test_task.rs` of rmcp 3.11) wires it: `call_tool`
/// spawns on the manager when the client declared the tasks extension and
/// answers `CreateTaskResult`; `tasks/get`, `tasks/update` and
/// `tasks/cancel` go to the manager.
#[derive(Clone)]
pub(crate) struct Peer {
    pub(crate) tasks: TaskManager,
}

impl rmcp::ServerHandler for Peer {
    async fn call_tool(
        &self,
        request: r::CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<r::CallToolResponse, rmcp::ErrorData> {
        let tasks_declared = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        if !tasks_declared {
            return Err(rmcp::ErrorData::invalid_request(
                "this tool runs only as a task: declare the tasks extension",
                None,
            ));
        }
        let task = match request.name.as_ref() {
            "quick" => self.tasks.spawn(TaskOptions::new(), |_ctx| {
                Box::pin(async move { Ok(r::CallToolResult::success(vec![r::ContentBlock::text("ok")])) })
            }),
            "park" => self.tasks.spawn(TaskOptions::new(), |ctx| {
                Box::pin(async move {
                    ctx.cancelled().await;
                    Err(TaskExit::Cancelled)
                })
            }),
            other => {
                return Err(rmcp::ErrorData::invalid_params(
                    format!("unknown tool {other:?}"),
                    None,
                ));
            }
        };
        Ok(r::CallToolResponse::Task(r::CreateTaskResult::new(task)))
    }

    async fn get_task(
        &self,
        request: r::GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<r::GetTaskResult, rmcp::ErrorData> {
        Ok(r::GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    async fn update_task(
        &self,
        request: r::UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), rmcp::ErrorData> {
        self.tasks.update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: r::CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), rmcp::ErrorData> {
        self.tasks.cancel_task(&request.task_id)
    }

    fn get_info(&self) -> r::ServerConfig {
        r::ServerConfig::new(
            r::ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
    }
}

pub(crate) fn start_rmcp() -> Host {
    let rt = server_runtime(RMCP_THREADS);
    host_router(rt, vec![RMCP_THREADS], || {
        let peer = Peer {
            tasks: TaskManager::new(),
        };
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true);
        let service = StreamableHttpService::new(
            move || Ok(peer.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        axum::Router::new().nest_service("/mcp", service)
    })
}

/// The floor: an axum handler on the same kind of runtime that reads the
/// request body and answers `body` (a real `tasks/get` answer of subtask's,
/// so the same size) as `application/json`.
pub(crate) fn start_axum(body: Bytes) -> Host {
    let rt = server_runtime(AXUM_THREADS);
    host_router(rt, vec![AXUM_THREADS], move || {
        axum::Router::new().route(
            "/mcp",
            axum::routing::post(move |request: Bytes| {
                let body = body.clone();
                async move {
                    std::hint::black_box(request);
                    ([(axum::http::header::CONTENT_TYPE, "application/json")], body)
                }
            }),
        )
    })
}
