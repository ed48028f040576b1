//! The fixture server for the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`, see `docs/conformance-notes.md`).
//!
//! It serves, at `http://ADDR/mcp` on the stateless 2026-07-28 wire, every
//! tool and prompt the suite's server scenarios call, with the behaviour the
//! checks rely on (the notes' §4 table):
//!
//! * plain tools: `test_simple_text` (listed **first**: `http-header-validation`
//!   calls whichever tool comes first with `{}`), `test_error_handling`,
//!   `greet`, `test_missing_capability`, `test_streaming_elicitation`,
//!   `test_logging_tool`;
//! * task tools (the tasks extension): `slow_compute`, `failing_job` (a tool
//!   error: `completed` with `isError`), `protocol_error_job` (`failed` with a
//!   JSON-RPC error), `confirm_delete` and `multi_input` (in-task input through
//!   `tasks/update`), `test_tool_with_task` (an MRTR round, then a task);
//! * MRTR tools (SEP-2322 `input_required` rounds): the eight
//!   `test_input_required_result_*` tools, and the prompt
//!   `test_input_required_result_prompt`.
//!
//! The server does the protocol work: it seals and verifies `requestState`
//! (a fixture only sees the verified JSON state it returned), rejects
//! malformed `inputResponses`, answers `-32021` for task-required tools when
//! the client lacks the tasks extension, and runs a task to completion for a
//! client that cannot poll one. The fixtures here only decide what to ask,
//! validate the answers they understand (ignoring keys they did not ask
//! for), and produce results.
//!
//! ```text
//! cargo run --release --example conformance_server -- --listen 127.0.0.1:8080
//! scripts/conformance.sh http://127.0.0.1:8080/mcp
//! ```
//!
//! (`scripts/conformance.sh` without a URL builds and starts this example itself.)

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use serde_json::{Map, Value, json};
use subtask::model::{ClientCapabilities, ErrorCode, ErrorObject, JsonObject};
use subtask::runtime::{Runtime, RuntimeConfig, TaskContext, TaskError};
use subtask::server::{
    ElicitAnswer, PromptSpec, Server, ServerBuilder, ServerConfig, TaskSupport, ToolCall, ToolOutcome,
    ToolSpec, elicitation, error_result, list_roots, sampling, text_result,
};
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

/// Serve the conformance suite's fixture tools and prompt over Streamable HTTP.
#[derive(Debug, Parser)]
#[command(name = "conformance_server", about)]
struct Args {
    /// Address to listen on; the endpoint is `http://ADDR/mcp`.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();

    let server = fixture_server(Runtime::new(RuntimeConfig::default()));
    let listener = TcpListener::bind(args.listen).await?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    tracing::info!(%url, "conformance fixtures listening");
    println!("conformance_server: serving the conformance fixtures at {url}");

    subtask::server::http::serve(server, listener, subtask::server::http::shutdown_signal()).await
}

// ----- the fixture table ---------------------------------------------------------

/// The server with every fixture, in `tools/list` order: plain tools
/// (`test_simple_text` first), task tools, MRTR tools, then the prompt.
fn fixture_server(runtime: Runtime) -> Server {
    let builder = Server::builder(runtime, ServerConfig::default());
    mrtr_fixtures(task_fixtures(plain_fixtures(builder))).build()
}

/// Tools answered synchronously.
fn plain_fixtures(builder: ServerBuilder) -> ServerBuilder {
    use TaskSupport::Forbidden;
    builder
        .tool(
            spec("test_simple_text", "Returns a fixed text response.", Forbidden),
            test_simple_text,
        )
        .tool(
            spec(
                "test_error_handling",
                "Always returns a tool error (isError: true).",
                Forbidden,
            ),
            test_error_handling,
        )
        .tool(
            ToolSpec::new(
                "greet",
                "Greets someone by name: \"Hello, <name>!\". Never runs as a task.",
                json!({
                    "type": "object",
                    "properties": {"name": {"type": "string", "description": "Who to greet"}},
                    "required": ["name"],
                }),
                Forbidden,
            ),
            greet,
        )
        .tool(
            spec(
                "test_missing_capability",
                "Needs the client's sampling capability: -32021 without it, else asks for one completion.",
                Forbidden,
            ),
            test_missing_capability,
        )
        .tool(
            spec(
                "test_streaming_elicitation",
                "Asks for an elicitation through an input_required result (never a request on the stream).",
                Forbidden,
            ),
            test_streaming_elicitation,
        )
        .tool(
            spec(
                "test_logging_tool",
                "Does some work; sends no log notifications, since no logLevel was requested.",
                Forbidden,
            ),
            test_logging_tool,
        )
}

/// Tools that run as tasks (for clients with the tasks extension).
fn task_fixtures(builder: ServerBuilder) -> ServerBuilder {
    use TaskSupport::{Optional, Required};
    builder
        .tool(
            ToolSpec::new(
                "slow_compute",
                "Computes for `seconds` seconds, then returns a text result. Runs as a task when the \
                 client declares the tasks extension.",
                json!({
                    "type": "object",
                    "properties": {
                        "seconds": {"type": "number", "minimum": 0, "description": "How long to work"},
                        "label": {"type": "string", "description": "A label echoed in the result"},
                    },
                }),
                Optional,
            ),
            slow_compute,
        )
        .tool(
            spec(
                "failing_job",
                "A task that works for about a second, then ends with a tool error (completed, isError).",
                Required,
            ),
            failing_job,
        )
        .tool(
            spec(
                "protocol_error_job",
                "A task that fails with a JSON-RPC error (status failed).",
                Required,
            ),
            protocol_error_job,
        )
        .tool(
            ToolSpec::new(
                "confirm_delete",
                "Deletes a file after the user confirms through an in-task elicitation (tasks/update).",
                json!({
                    "type": "object",
                    "properties": {"filename": {"type": "string", "description": "The file to delete"}},
                    "required": ["filename"],
                }),
                Required,
            ),
            confirm_delete,
        )
        .tool(
            spec(
                "multi_input",
                "A task that asks for two inputs at once and completes when both are answered.",
                Required,
            ),
            multi_input,
        )
        .tool(
            spec(
                "test_tool_with_task",
                "Asks for a name through an input_required round, then greets it from a task.",
                Required,
            ),
            test_tool_with_task,
        )
}

/// Tools and the prompt answered in `input_required` rounds (SEP-2322).
fn mrtr_fixtures(builder: ServerBuilder) -> ServerBuilder {
    use TaskSupport::Forbidden;
    builder
        .tool(
            spec(
                "test_input_required_result_elicitation",
                "Asks for the user's name (elicitation, key user_name), then greets them.",
                Forbidden,
            ),
            ir_elicitation,
        )
        .tool(
            spec(
                "test_input_required_result_sampling",
                "Asks the client's model a question (sampling, key capital_question), returns the answer.",
                Forbidden,
            ),
            ir_sampling,
        )
        .tool(
            spec(
                "test_input_required_result_list_roots",
                "Asks for the client's roots (roots/list, key client_roots), lists them.",
                Forbidden,
            ),
            ir_list_roots,
        )
        .tool(
            spec(
                "test_input_required_result_request_state",
                "Asks for a confirmation (key confirm) and needs its requestState echoed: \"state-ok\".",
                Forbidden,
            ),
            ir_request_state,
        )
        .tool(
            spec(
                "test_input_required_result_multiple_inputs",
                "Asks for an elicitation, a sampling and the roots in one round (user_name, greeting, \
                 client_roots).",
                Forbidden,
            ),
            ir_multiple_inputs,
        )
        .tool(
            spec(
                "test_input_required_result_multi_round",
                "Two input rounds (step1: a name, step2: a colour), each with a new requestState.",
                Forbidden,
            ),
            ir_multi_round,
        )
        .tool(
            spec(
                "test_input_required_result_tampered_state",
                "Asks for a confirmation with an integrity-protected requestState; a tampered state is \
                 rejected.",
                Forbidden,
            ),
            ir_tampered_state,
        )
        .tool(
            spec(
                "test_input_required_result_capabilities",
                "Asks only for the inputs the client's declared capabilities allow (elicitation, \
                 sampling, roots).",
                Forbidden,
            ),
            ir_capabilities,
        )
        .prompt(
            PromptSpec {
                name: "test_input_required_result_prompt".to_owned(),
                description: "Asks for context (elicitation, key user_context), then returns a prompt \
                              using it."
                    .to_owned(),
                arguments: Vec::new(),
            },
            ir_prompt,
        )
}

/// The spec of a tool without arguments.
fn spec(name: &str, description: &str, task_support: TaskSupport) -> ToolSpec {
    ToolSpec::new(
        name,
        description,
        json!({"type": "object", "properties": {}}),
        task_support,
    )
}

// ----- plain tools ---------------------------------------------------------------

/// `test_simple_text`: a fixed text (called without an `arguments` key).
async fn test_simple_text(_call: ToolCall) -> ToolOutcome {
    ToolOutcome::Complete(text_result("This is a simple text response for testing."))
}

/// `test_error_handling`: a tool error, not a JSON-RPC error.
async fn test_error_handling(_call: ToolCall) -> ToolOutcome {
    ToolOutcome::Complete(error_result(
        "This tool intentionally returns an error for testing",
    ))
}

/// `greet`: `"Hello, <name>!"`, synchronously (the legacy `task` param is
/// the server's to ignore).
async fn greet(call: ToolCall) -> ToolOutcome {
    match call.str_arg("name") {
        Some(name) => ToolOutcome::Complete(text_result(format!("Hello, {name}!"))),
        None => ToolOutcome::Complete(error_result("greet needs a string argument `name`")),
    }
}

/// `test_missing_capability`: `-32021` with `requiredCapabilities.sampling`
/// for a client without sampling; otherwise one sampling round.
async fn test_missing_capability(call: ToolCall) -> ToolOutcome {
    if let Some(missing) = require(&call, Capability::Sampling) {
        return missing;
    }
    let ask = sampling("Say hello in one word.", 20);
    match call.sampled_text("completion") {
        Err(e) => ToolOutcome::Error(e),
        Ok(None) => ToolOutcome::input_required([("completion", ask)], None),
        Ok(Some(text)) => ToolOutcome::Complete(text_result(format!("The client's model said: {text}"))),
    }
}

/// `test_streaming_elicitation`: the elicitation goes out as an
/// `input_required` result, never as a server request on the response stream.
async fn test_streaming_elicitation(call: ToolCall) -> ToolOutcome {
    if call.client_capabilities.elicitation.is_none() {
        return ToolOutcome::Complete(text_result(
            "The client declared no elicitation capability; nothing to ask.",
        ));
    }
    let ask = elicitation(
        "Which colour do you like?",
        json!({"color": {"type": "string"}}),
        &["color"],
    );
    match call.elicited("favorite_color", &ask) {
        Err(e) => ToolOutcome::Error(e),
        Ok(ElicitAnswer::Missing) => ToolOutcome::input_required([("favorite_color", ask)], None),
        Ok(ElicitAnswer::Accepted(content)) => {
            ToolOutcome::Complete(text_result(format!("You like {}.", str_field(&content, "color"))))
        }
        Ok(ElicitAnswer::Refused(action)) => {
            ToolOutcome::Complete(text_result(format!("No colour given ({action}).")))
        }
    }
}

/// `test_logging_tool`: completes at once; the request carried no `logLevel`,
/// so no `notifications/message` is sent.
async fn test_logging_tool(_call: ToolCall) -> ToolOutcome {
    tracing::info!("test_logging_tool ran (server-side log only)");
    ToolOutcome::Complete(text_result(
        "Done; no log notifications were requested (no logLevel).",
    ))
}

// ----- task tools ----------------------------------------------------------------

/// `slow_compute {seconds, label}`: works for `seconds`, as a task (the server
/// runs it to completion and answers synchronously for a client without the
/// tasks extension). Cancellable at any moment.
async fn slow_compute(call: ToolCall) -> ToolOutcome {
    let seconds = call.f64_arg("seconds").unwrap_or(1.0).clamp(0.0, 3600.0);
    let label = call.str_arg("label").unwrap_or("slow_compute").to_owned();
    ToolOutcome::task(move |ctx| async move {
        ctx.set_status_message(format!("{label}: computing for {seconds} s"));
        work(&ctx, Duration::from_secs_f64(seconds)).await?;
        ctx.clear_status_message();
        Ok(text_result(format!("{label}: computed for {seconds} s")))
    })
}

/// `failing_job`: a task that ends `completed` with a tool error after about 1 s.
async fn failing_job(_call: ToolCall) -> ToolOutcome {
    ToolOutcome::task(|ctx| async move {
        ctx.set_status_message("working on a job that will fail");
        work(&ctx, Duration::from_secs(1)).await?;
        Ok(error_result(
            "The job failed: this tool error is reported in a completed task (isError: true).",
        ))
    })
}

/// `protocol_error_job`: a task that ends `failed` with a JSON-RPC error.
async fn protocol_error_job(_call: ToolCall) -> ToolOutcome {
    ToolOutcome::task(|ctx| async move {
        work(&ctx, Duration::from_millis(100)).await?;
        Err(ErrorObject::new(
            ErrorCode::INTERNAL_ERROR,
            "protocol_error_job: the job hit an internal error (a JSON-RPC error fails the task)",
        ))
    })
}

/// `confirm_delete {filename}`: asks in-task for a confirmation (key
/// `confirm-<uuid>`), answered through `tasks/update`.
async fn confirm_delete(call: ToolCall) -> ToolOutcome {
    let filename = call.str_arg("filename").unwrap_or("unnamed file").to_owned();
    ToolOutcome::task(move |ctx| async move {
        let ask = elicitation(
            &format!("Delete {filename}?"),
            json!({"confirm": {"type": "boolean", "description": "Confirm the deletion"}}),
            &["confirm"],
        );
        Ok(match ask_in_task(&ctx, "confirm", &ask).await? {
            Ok(c) if c.get("confirm").and_then(Value::as_bool) == Some(true) => {
                text_result(format!("Deleted {filename}."))
            }
            Ok(_) => text_result(format!("Kept {filename}: the deletion was not confirmed.")),
            Err(action) => text_result(format!("Kept {filename}: the user did not confirm ({action}).")),
        })
    })
}

/// `multi_input`: a task with two input requests pending at the same time;
/// completes when both are answered (in any order, one `tasks/update` each or
/// both in one).
async fn multi_input(_call: ToolCall) -> ToolOutcome {
    ToolOutcome::task(|ctx| async move {
        let ask = |n: u32| {
            elicitation(
                &format!("Input {n} of 2: a name, and confirm it"),
                json!({"name": {"type": "string"}, "confirm": {"type": "boolean"}}),
                &["name"],
            )
        };
        let (first, second) = futures::future::try_join(
            ask_in_task(&ctx, "input-1", &ask(1)),
            ask_in_task(&ctx, "input-2", &ask(2)),
        )
        .await?;
        let name = |a: &Result<Map<String, Value>, String>| match a {
            Ok(content) => str_field(content, "name"),
            Err(action) => format!("(none: {action})"),
        };
        Ok(text_result(format!(
            "Received both inputs: {} and {}.",
            name(&first),
            name(&second)
        )))
    })
}

/// `test_tool_with_task`: an MRTR round for a name (key `user_name`), then a
/// task whose result greets that name.
async fn test_tool_with_task(call: ToolCall) -> ToolOutcome {
    if let Some(missing) = require(&call, Capability::Elicitation) {
        return missing;
    }
    let ask = ask_name();
    match call.elicited("user_name", &ask) {
        Err(e) => ToolOutcome::Error(e),
        Ok(ElicitAnswer::Missing) => {
            ToolOutcome::input_required([("user_name", ask)], Some(json!({"stage": "ask-name"})))
        }
        Ok(ElicitAnswer::Accepted(content)) => {
            let name = str_field(&content, "name");
            ToolOutcome::task(move |ctx| async move {
                ctx.set_status_message(format!("preparing a greeting for {name}"));
                work(&ctx, Duration::from_millis(200)).await?;
                Ok(text_result(format!("Hello, {name}! (greeted from a task)")))
            })
        }
        Ok(ElicitAnswer::Refused(action)) => ToolOutcome::task(move |_ctx| async move {
            Ok(error_result(format!(
                "No name was given ({action}); nobody to greet."
            )))
        }),
    }
}

// ----- MRTR tools (input_required rounds) ----------------------------------------

/// `test_input_required_result_elicitation`: key `user_name`, then
/// `"Hello, <name>!"`. Wrong keys get a fresh round; unknown extra keys are
/// ignored; an accepted answer without a string `name` is an error.
async fn ir_elicitation(call: ToolCall) -> ToolOutcome {
    if let Some(missing) = require(&call, Capability::Elicitation) {
        return missing;
    }
    let ask = ask_name();
    match call.elicited("user_name", &ask) {
        Err(e) => ToolOutcome::Error(e),
        Ok(ElicitAnswer::Missing) => ToolOutcome::input_required([("user_name", ask)], None),
        Ok(ElicitAnswer::Accepted(content)) => {
            ToolOutcome::Complete(text_result(format!("Hello, {}!", str_field(&content, "name"))))
        }
        Ok(ElicitAnswer::Refused(action)) => {
            ToolOutcome::Complete(error_result(format!("No name was given ({action}).")))
        }
    }
}

/// `test_input_required_result_sampling`: key `capital_question`, then the
/// model's answer.
async fn ir_sampling(call: ToolCall) -> ToolOutcome {
    if let Some(missing) = require(&call, Capability::Sampling) {
        return missing;
    }
    match call.sampled_text("capital_question") {
        Err(e) => ToolOutcome::Error(e),
        Ok(None) => ToolOutcome::input_required(
            [(
                "capital_question",
                sampling("What is the capital of France?", 100),
            )],
            None,
        ),
        Ok(Some(text)) => ToolOutcome::Complete(text_result(format!("The model answered: {text}"))),
    }
}

/// `test_input_required_result_list_roots`: key `client_roots`, then the roots.
async fn ir_list_roots(call: ToolCall) -> ToolOutcome {
    if let Some(missing) = require(&call, Capability::Roots) {
        return missing;
    }
    match call.listed_roots("client_roots") {
        Err(e) => ToolOutcome::Error(e),
        Ok(None) => ToolOutcome::input_required([("client_roots", list_roots())], None),
        Ok(Some(roots)) => ToolOutcome::Complete(text_result(describe_roots(&roots))),
    }
}

/// `test_input_required_result_request_state`: key `confirm`; completes only
/// with the echoed `requestState` ("state-ok").
async fn ir_request_state(call: ToolCall) -> ToolOutcome {
    confirm_with_state(&call, "request_state")
}

/// `test_input_required_result_tampered_state`: like `request_state`; the
/// server rejects a tampered state before this runs.
async fn ir_tampered_state(call: ToolCall) -> ToolOutcome {
    confirm_with_state(&call, "tampered_state")
}

/// `test_input_required_result_multiple_inputs`: `user_name` (elicitation),
/// `greeting` (sampling) and `client_roots` (roots) in one round, with a
/// `requestState`; needs all three capabilities.
async fn ir_multiple_inputs(call: ToolCall) -> ToolOutcome {
    let missing: Vec<Capability> = Capability::ALL
        .into_iter()
        .filter(|c| !c.declared(&call))
        .collect();
    if !missing.is_empty() {
        return ToolOutcome::Error(missing_capabilities(&missing));
    }
    match gather(&call, &standard_questions()) {
        Ok(answers) => ToolOutcome::Complete(text_result(format!(
            "All inputs received: {}.",
            answers.join("; ")
        ))),
        Err(next) => next,
    }
}

/// `test_input_required_result_multi_round`: round 1 asks `step1` (a name),
/// round 2 asks `step2` (a colour) with a new state carrying the name,
/// round 3 completes. The round comes from the verified state only.
async fn ir_multi_round(call: ToolCall) -> ToolOutcome {
    if let Some(missing) = require(&call, Capability::Elicitation) {
        return missing;
    }
    let state = call.request_state.clone().unwrap_or(Value::Null);
    let step1 = || {
        elicitation(
            "Step 1: What is your name?",
            json!({"name": {"type": "string"}}),
            &["name"],
        )
    };
    let step2 = || {
        elicitation(
            "Step 2: What is your favorite color?",
            json!({"color": {"type": "string"}}),
            &["color"],
        )
    };
    match state.get("round").and_then(Value::as_u64) {
        // Round 1 (also for a call without state: the state proves the round).
        None | Some(0) => ToolOutcome::input_required([("step1", step1())], Some(json!({"round": 1}))),
        Some(1) => match call.elicited("step1", &step1()) {
            Err(e) => ToolOutcome::Error(e),
            Ok(ElicitAnswer::Missing) => ToolOutcome::input_required([("step1", step1())], Some(state)),
            Ok(ElicitAnswer::Accepted(content)) => ToolOutcome::input_required(
                [("step2", step2())],
                Some(json!({"round": 2, "name": str_field(&content, "name")})),
            ),
            Ok(ElicitAnswer::Refused(action)) => {
                ToolOutcome::Complete(error_result(format!("Stopped at step 1 ({action}).")))
            }
        },
        Some(_) => {
            let name = state
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("someone")
                .to_owned();
            match call.elicited("step2", &step2()) {
                Err(e) => ToolOutcome::Error(e),
                Ok(ElicitAnswer::Missing) => ToolOutcome::input_required([("step2", step2())], Some(state)),
                Ok(ElicitAnswer::Accepted(content)) => ToolOutcome::Complete(text_result(format!(
                    "{name}'s favorite color is {}.",
                    str_field(&content, "color")
                ))),
                Ok(ElicitAnswer::Refused(action)) => {
                    ToolOutcome::Complete(error_result(format!("Stopped at step 2 ({action}).")))
                }
            }
        }
    }
}

/// `test_input_required_result_capabilities`: asks only for what the request
/// declares (elicitation → `user_name`, sampling → `greeting`, roots →
/// `client_roots`); completes at once when it declares none of them.
async fn ir_capabilities(call: ToolCall) -> ToolOutcome {
    let questions: Vec<Question> = standard_questions()
        .into_iter()
        .filter(|q| q.capability.declared(&call))
        .collect();
    if questions.is_empty() {
        return ToolOutcome::Complete(text_result(
            "The client declared none of elicitation, sampling or roots, so nothing was asked.",
        ));
    }
    match gather(&call, &questions) {
        Ok(answers) => ToolOutcome::Complete(text_result(format!(
            "Asked only for declared capabilities; received: {}.",
            answers.join("; ")
        ))),
        Err(next) => next,
    }
}

/// The prompt `test_input_required_result_prompt`: key `user_context`, then a
/// `GetPromptResult` using it.
async fn ir_prompt(call: ToolCall) -> ToolOutcome {
    if let Some(missing) = require(&call, Capability::Elicitation) {
        return missing;
    }
    let ask = elicitation(
        "What context should the prompt use?",
        json!({"context": {"type": "string"}}),
        &["context"],
    );
    match call.elicited("user_context", &ask) {
        Err(e) => ToolOutcome::Error(e),
        Ok(ElicitAnswer::Missing) => ToolOutcome::input_required([("user_context", ask)], None),
        Ok(ElicitAnswer::Accepted(content)) => {
            let given = str_field(&content, "context");
            ToolOutcome::Complete(object(json!({
                "description": "A prompt built from the context the user gave",
                "messages": [{
                    "role": "user",
                    "content": {"type": "text", "text": format!("Using this context: {given}. What should I do next?")},
                }],
            })))
        }
        Ok(ElicitAnswer::Refused(action)) => ToolOutcome::Error(ErrorObject::new(
            ErrorCode::INVALID_PARAMS,
            format!("the prompt needs a context, and the user gave none ({action})"),
        )),
    }
}

// ----- shared fixture logic ------------------------------------------------------

/// The `confirm` round of the request-state fixtures: round 1 issues a state
/// naming the fixture; an answer counts only with that state echoed (a call
/// without it starts over).
fn confirm_with_state(call: &ToolCall, fixture: &str) -> ToolOutcome {
    if let Some(missing) = require(call, Capability::Elicitation) {
        return missing;
    }
    let ask = elicitation(
        "Please confirm to continue.",
        json!({"ok": {"type": "boolean"}}),
        &["ok"],
    );
    let issued = call
        .request_state
        .as_ref()
        .is_some_and(|s| s.get("fixture").and_then(Value::as_str) == Some(fixture));
    if !issued {
        let state = json!({"fixture": fixture, "nonce": uuid::Uuid::new_v4().to_string()});
        return ToolOutcome::input_required([("confirm", ask)], Some(state));
    }
    match call.elicited("confirm", &ask) {
        Err(e) => ToolOutcome::Error(e),
        Ok(ElicitAnswer::Missing) => {
            ToolOutcome::input_required([("confirm", ask)], call.request_state.clone())
        }
        Ok(ElicitAnswer::Accepted(content)) => {
            let ok = content.get("ok").and_then(Value::as_bool).unwrap_or(false);
            ToolOutcome::Complete(text_result(format!(
                "state-ok: the echoed requestState verified; ok = {ok}"
            )))
        }
        Ok(ElicitAnswer::Refused(action)) => ToolOutcome::Complete(text_result(format!(
            "state-ok: the echoed requestState verified; {action}"
        ))),
    }
}

/// One input request of a multi-request round.
struct Question {
    key: &'static str,
    capability: Capability,
    request: JsonObject,
}

/// `user_name` (elicitation), `greeting` (sampling), `client_roots` (roots).
fn standard_questions() -> Vec<Question> {
    vec![
        Question {
            key: "user_name",
            capability: Capability::Elicitation,
            request: ask_name(),
        },
        Question {
            key: "greeting",
            capability: Capability::Sampling,
            request: sampling("Generate a greeting", 50),
        },
        Question {
            key: "client_roots",
            capability: Capability::Roots,
            request: list_roots(),
        },
    ]
}

/// Collects the answers to `questions` (one summary line each), or returns
/// the next round: an `input_required` with the unanswered ones (and a state
/// recording the round), or an error for a malformed answer.
fn gather(call: &ToolCall, questions: &[Question]) -> Result<Vec<String>, ToolOutcome> {
    let mut answers = Vec::new();
    let mut missing = Vec::new();
    for q in questions {
        let answer = match q.capability {
            Capability::Elicitation => call.elicited(q.key, &q.request).map(|r| match r {
                ElicitAnswer::Missing => None,
                ElicitAnswer::Accepted(c) => Some(format!("name {}", str_field(&c, "name"))),
                ElicitAnswer::Refused(action) => Some(format!("no name ({action})")),
            }),
            Capability::Sampling => call
                .sampled_text(q.key)
                .map(|t| t.map(|t| format!("greeting {t:?}"))),
            Capability::Roots => call.listed_roots(q.key).map(|r| r.map(|r| describe_roots(&r))),
        };
        match answer {
            Err(e) => return Err(ToolOutcome::Error(e)),
            Ok(Some(line)) => answers.push(line),
            Ok(None) => missing.push(q),
        }
    }
    if missing.is_empty() {
        return Ok(answers);
    }
    let asked: Vec<&str> = questions.iter().map(|q| q.key).collect();
    let round = call
        .request_state
        .as_ref()
        .and_then(|s| s.get("round"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
        + 1;
    Err(ToolOutcome::input_required(
        missing.iter().map(|q| (q.key, q.request.clone())),
        Some(json!({"asked": asked, "round": round})),
    ))
}

/// A client capability a fixture may need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Capability {
    Elicitation,
    Sampling,
    Roots,
}

impl Capability {
    const ALL: [Capability; 3] = [Capability::Elicitation, Capability::Sampling, Capability::Roots];

    /// Whether the request declared it.
    fn declared(self, call: &ToolCall) -> bool {
        let caps = &call.client_capabilities;
        match self {
            Capability::Elicitation => caps.elicitation.is_some(),
            Capability::Sampling => caps.sampling.is_some(),
            Capability::Roots => caps.roots.is_some(),
        }
    }
}

/// `-32021` listing `missing` in `data.requiredCapabilities`.
fn missing_capabilities(missing: &[Capability]) -> ErrorObject {
    let mut required = ClientCapabilities::default();
    for c in missing {
        match c {
            Capability::Elicitation => required.elicitation = Some(JsonObject::new()),
            Capability::Sampling => required.sampling = Some(JsonObject::new()),
            Capability::Roots => required.roots = Some(JsonObject::new()),
        }
    }
    ErrorObject::missing_required_client_capability(&required)
}

/// `Some(-32021)` when the request did not declare `capability`.
fn require(call: &ToolCall, capability: Capability) -> Option<ToolOutcome> {
    (!capability.declared(call)).then(|| ToolOutcome::Error(missing_capabilities(&[capability])))
}

// ----- input requests and answers ------------------------------------------------

/// The `{name: string}` elicitation used by several fixtures.
fn ask_name() -> JsonObject {
    elicitation(
        "What is your name?",
        json!({"name": {"type": "string"}}),
        &["name"],
    )
}

/// `"2 roots: file:///a, file:///b"`.
fn describe_roots(roots: &[String]) -> String {
    match roots.len() {
        0 => "The client has no roots.".to_owned(),
        1 => format!("1 root: {}", roots[0]),
        n => format!("{n} roots: {}", roots.join(", ")),
    }
}

/// A string field of validated content (`""` for a field the schema made optional).
fn str_field(content: &Map<String, Value>, field: &str) -> String {
    content
        .get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

// ----- small helpers -------------------------------------------------------------

/// A fresh in-task input key: `<prefix>-<uuid>` (keys are unique per task).
fn minted_key(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4())
}

/// Asks in-task for the elicitation `request` under a fresh key
/// `<prefix>-<uuid>` (the task shows `input_required` until `tasks/update`
/// answers it). Returns the accepted content, or `Err(action)` for a decline
/// or cancel. An answer that does not fit the schema is asked again under a
/// new key, up to [`IN_TASK_ATTEMPTS`] times; then the task fails with
/// `-32602`.
async fn ask_in_task(
    ctx: &TaskContext,
    prefix: &str,
    request: &JsonObject,
) -> Result<Result<Map<String, Value>, String>, ErrorObject> {
    let mut attempt = 1;
    loop {
        let key = minted_key(prefix);
        let answer = ctx.request_input(key.clone(), request.clone()).await?;
        let reply = ElicitAnswer::parse(&key, &answer, request);
        if attempt > 1 && reply.is_ok() {
            ctx.clear_status_message();
        }
        match reply {
            Ok(ElicitAnswer::Accepted(content)) => return Ok(Ok(content)),
            Ok(ElicitAnswer::Refused(action)) => return Ok(Err(action)),
            Ok(ElicitAnswer::Missing) => unreachable!("an answer was delivered"),
            Err(e) if attempt >= IN_TASK_ATTEMPTS => return Err(e),
            Err(e) => {
                tracing::info!(%key, error = %e, "malformed in-task answer; asking again");
                ctx.set_status_message(format!("asking again: {}", e.message));
                attempt += 1;
            }
        }
    }
}

/// How often [`ask_in_task`] asks before giving up on malformed answers.
const IN_TASK_ATTEMPTS: u32 = 3;

/// Works for `duration`, stopping early (as an interrupted task) on cancel.
async fn work(ctx: &TaskContext, duration: Duration) -> Result<(), ErrorObject> {
    tokio::select! {
        () = tokio::time::sleep(duration) => Ok(()),
        () = ctx.cancelled() => Err(TaskError::Interrupted.into()),
    }
}

/// A JSON object literal.
fn object(value: Value) -> JsonObject {
    JsonObject::from_value(value).expect("a JSON object literal")
}
