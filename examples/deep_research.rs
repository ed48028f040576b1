//! A deep-research tool run in process (no server), acting as both the tool
//! and its client.
//!
//! The `deep_research` tool answers a question from a small built-in corpus:
//!
//! * the root task plans three sub-questions and fans out one subtask each;
//! * every sub-question runs `search -> read -> summarize` as its own
//!   subtasks, chained with `after` dependencies whose outcomes arrive in
//!   `ctx.dependencies()`, with checkpoints between steps;
//! * the root fans in with a `synthesize` subtask that runs `after` every
//!   sub-question and writes the final answer, citing subtasks by task id
//!   and sources by title.
//!
//! Meanwhile `main`, acting as the client, steers the root ("focus on failure
//! handling"; the root replaces a not-yet-started sub-question), pauses the
//! whole tree, shows it parked, resumes it, and prints the ordered partial
//! results as they arrive (`Runtime::results`).
//!
//! Two lanes of research run at once: the third sub-question waits (`after`)
//! for the first, so it is still queued when the steer arrives.
//!
//! ```text
//! cargo run --example deep_research
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use parking_lot::Mutex;
use serde_json::{Value, json};
use subtask::core::{ClientView, RootOptions};
use subtask::model::{DetailedTask, ErrorCode, ErrorObject, JsonObject, TaskId, TaskPayload, TaskStatus};
use subtask::runtime::{
    DependencyOutcome, HandlerResult, Runtime, RuntimeConfig, SubtaskHandle, SubtaskOptions, TaskContext,
    TaskOutcome,
};

/// The client understands `paused` (SEP-2669).
const VIEW: ClientView = ClientView::PAUSE_AWARE;

const QUESTION: &str = "How do MCP tasks handle long-running work?";
const STEER: &str = "focus on failure handling";

// ----- the corpus -------------------------------------------------------------

/// A document of the built-in corpus. Sources are made up.
struct Doc {
    title: &'static str,
    source: &'static str,
    body: &'static str,
}

const CORPUS: &[Doc] = &[
    Doc {
        title: "Tasks in a nutshell",
        source: "MCP Tasks Guide (draft), section 1",
        body: "A request that may take long can be augmented with a task. \
               The server answers at once with a taskId and does the work in the background. \
               A task moves through working, input_required, completed, failed and cancelled; \
               the last three statuses are terminal.",
    },
    Doc {
        title: "Polling with tasks/get",
        source: "MCP Tasks Guide (draft), section 3",
        body: "Clients track a task by polling tasks/get no faster than its suggested pollInterval. \
               Servers may also push notifications/tasks status updates, but polling stays the reliable fallback. \
               The statusMessage tells the user what the task is doing right now.",
    },
    Doc {
        title: "Getting results with tasks/result",
        source: "MCP Tasks Guide (draft), section 4",
        body: "tasks/result waits until the task is terminal and returns exactly what the original request \
               would have returned, such as a CallToolResult. \
               A tool error is a completed task whose result has isError set; \
               a failed task carries a JSON-RPC error instead.",
    },
    Doc {
        title: "Time to live and deletion",
        source: "MCP Tasks Guide (draft), section 5",
        body: "Every task has a ttl in milliseconds counted from its creation. \
               When the ttl elapses the server may fail unfinished work as expired and later delete the task. \
               Clients should fetch results before the retention window closes.",
    },
    Doc {
        title: "Cancelling a task",
        source: "MCP Tasks Guide (draft), section 6",
        body: "tasks/cancel asks the server to stop the work. \
               The task turns cancelled only after its handler has unwound and every subtask has ended. \
               A handler that ignores the cancel is aborted after a grace period.",
    },
    Doc {
        title: "When the server needs input",
        source: "MCP Tasks Guide (draft), section 7",
        body: "When the server needs the user, the task moves to input_required and lists its inputRequests. \
               The client answers with tasks/update and the task returns to working.",
    },
    Doc {
        title: "SEP-2268: subtasks",
        source: "SEP-2268 (proposal text)",
        body: "A task may spawn subtasks linked by parentTaskId and childTaskIds. \
               A parent completes only after all of its children are terminal. \
               Results of a task tree stream children first, in childTaskIds order.",
    },
    Doc {
        title: "SEP-2669: pause and resume",
        source: "SEP-2669 (proposal text)",
        body: "tasks/pause halts a task and its live descendants at their next safe point. \
               A paused task keeps its queued steer messages and input requests and continues after tasks/resume. \
               Clients without pause support see a paused task as working.",
    },
    Doc {
        title: "Steering a running task",
        source: "SEP-2669 (proposal text), steering",
        body: "tasks/steer queues a message that the handler receives at its next checkpoint. \
               Each steer message is delivered once and in order. \
               A steer sent after the handler finished is rejected.",
    },
    Doc {
        title: "Failure handling in task trees",
        source: "Operating MCP servers, ch. 4 (ops.example.org)",
        body: "By default a parent supervises its subtasks: a failed child is reported to the parent, which decides what to do. \
               A fail-fast subtask instead cancels its siblings and fails the parent with an error naming the failed task. \
               A panicking handler fails only its own task and the server keeps running.",
    },
    Doc {
        title: "Retries and idempotent steps",
        source: "blog.example.dev/mcp-tasks-in-production",
        body: "Long-running tools should make each step idempotent, so that a failed or expired task can be retried as a new task. \
               Keep progress in status messages rather than in the result.",
    },
    Doc {
        title: "Timeouts and partial results",
        source: "blog.example.dev/deep-tools-that-fail-well",
        body: "When a deep tool call times out, return the partial results with isError rather than failing outright. \
               Clients can then show what was found and offer a retry. \
               Record which step failed so the error names the failing subtask.",
    },
];

// ----- small helpers ------------------------------------------------------------

static START: OnceLock<Instant> = OnceLock::new();

/// Seconds since the start of the run, for log lines.
fn ts() -> String {
    let t = START.get_or_init(Instant::now).elapsed();
    format!("[{:>5.2}s]", t.as_secs_f64())
}

async fn work(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// A `CallToolResult`-shaped object.
fn tool_result(text: impl Into<String>, structured: Value) -> JsonObject {
    JsonObject::from_value(json!({
        "content": [{"type": "text", "text": text.into()}],
        "isError": false,
        "structuredContent": structured,
    }))
    .expect("a JSON object")
}

/// A tool error: a completed task whose result has `isError: true`.
fn tool_error(text: impl Into<String>) -> JsonObject {
    JsonObject::from_value(json!({"content": [{"type": "text", "text": text.into()}], "isError": true}))
        .expect("a JSON object")
}

fn text_of(result: &JsonObject) -> &str {
    result["content"][0]["text"].as_str().unwrap_or("")
}

fn is_error(result: &JsonObject) -> bool {
    result.get("isError").and_then(Value::as_bool).unwrap_or(false)
}

fn short(id: TaskId) -> String {
    id.to_string()[..8].to_owned()
}

fn clip(s: &str, max: usize) -> String {
    let s = s.replace('\n', " / ");
    if s.chars().count() <= max {
        s
    } else {
        format!("{}…", s.chars().take(max - 1).collect::<String>())
    }
}

/// The completed result of a dependency, or a tool error explaining why not.
fn dependency_result<'a>(deps: &'a [DependencyOutcome], step: &str) -> Result<&'a JsonObject, JsonObject> {
    match deps.first().map(|d| &d.outcome) {
        Some(TaskOutcome::Completed(r)) if !is_error(r) => Ok(r),
        Some(TaskOutcome::Completed(r)) => Err(tool_error(format!("{step} failed: {}", text_of(r)))),
        Some(TaskOutcome::Failed(e)) => Err(tool_error(format!("{step} failed: {}", e.message))),
        Some(TaskOutcome::Cancelled) => Err(tool_error(format!("{step} was cancelled"))),
        None => Err(tool_error(format!("no {step} dependency"))),
    }
}

/// Human-readable names of tasks. MCP tasks carry no title, so the tool keeps
/// this side table (a real server could put it in `_meta`) and the client
/// below reads it to label its output.
#[derive(Clone, Default)]
struct Labels(Arc<Mutex<HashMap<TaskId, String>>>);

impl Labels {
    fn set(&self, id: TaskId, label: impl Into<String>) {
        self.0.lock().insert(id, label.into());
    }

    fn get(&self, id: TaskId) -> String {
        self.0.lock().get(&id).cloned().unwrap_or_else(|| "?".to_owned())
    }
}

// ----- the tool -------------------------------------------------------------------

#[derive(Clone, Debug)]
struct SubQuestion {
    tag: String,
    text: String,
    keywords: Vec<String>,
}

impl SubQuestion {
    fn new(tag: &str, text: &str, keywords: &[&str]) -> Self {
        SubQuestion {
            tag: tag.to_owned(),
            text: text.to_owned(),
            keywords: keywords.iter().map(|k| (*k).to_owned()).collect(),
        }
    }
}

/// The (simulated) planner: splits the question into three sub-questions.
fn planner(_question: &str) -> Vec<SubQuestion> {
    vec![
        SubQuestion::new(
            "q1",
            "How does a long-running call become a task, and how is it tracked?",
            &["at once", "poll", "status", "working", "background"],
        ),
        SubQuestion::new(
            "q2",
            "How does a client get results and interact with a running task?",
            &["tasks/result", "input", "steer", "update", "resume"],
        ),
        SubQuestion::new(
            "q3",
            "How long is task state kept, and when is it deleted?",
            &["ttl", "delete", "retention", "expired"],
        ),
    ]
}

/// What a steer message asks for, if it names a focus.
fn focus_of(steer: &str) -> Option<String> {
    let lower = steer.to_lowercase();
    let rest = lower.strip_prefix("focus on ")?;
    Some(rest.trim().trim_end_matches('.').to_owned())
}

/// A sub-question matching a focus.
fn sub_question_for(focus: &str, tag: &str) -> SubQuestion {
    if focus.contains("fail") || focus.contains("error") {
        SubQuestion::new(
            tag,
            "How are failures, cancellation and timeouts handled?",
            &["fail", "error", "cancel", "timeout", "abort", "retr", "panic"],
        )
    } else {
        let words: Vec<&str> = focus.split_whitespace().filter(|w| w.len() > 3).collect();
        SubQuestion::new(tag, &format!("What do the sources say about {focus}?"), &words)
    }
}

fn score(doc: &Doc, keywords: &[String]) -> usize {
    let title = doc.title.to_lowercase();
    let body = doc.body.to_lowercase();
    keywords
        .iter()
        .map(|k| 2 * title.matches(k.as_str()).count() + body.matches(k.as_str()).count())
        .sum()
}

/// The sentence of `body` that matches the keywords best (the first on a tie).
fn best_sentence(body: &str, keywords: &[String]) -> String {
    body.split_inclusive(". ")
        .map(str::trim)
        .enumerate()
        .max_by_key(|(i, s)| {
            let l = s.to_lowercase();
            (
                keywords.iter().filter(|k| l.contains(k.as_str())).count(),
                std::cmp::Reverse(*i),
            )
        })
        .map(|(_, s)| s.trim_end_matches('.').to_owned() + ".")
        .unwrap_or_default()
}

/// `search`: ranks the corpus for the sub-question's keywords.
async fn search(ctx: TaskContext, sq: SubQuestion) -> HandlerResult {
    let mut scored: Vec<(usize, usize)> = Vec::new();
    for (chunk_no, chunk) in CORPUS.chunks(4).enumerate() {
        ctx.set_status_message(format!(
            "scanning documents {}-{}",
            chunk_no * 4 + 1,
            chunk_no * 4 + chunk.len()
        ));
        work(40).await;
        for (i, doc) in chunk.iter().enumerate() {
            scored.push((score(doc, &sq.keywords), chunk_no * 4 + i));
        }
        ctx.checkpoint().await?;
    }
    scored.sort_by_key(|&(s, i)| (std::cmp::Reverse(s), i));
    let hits: Vec<Value> = scored
        .iter()
        .filter(|(s, _)| *s > 0)
        .take(3)
        .map(|&(s, i)| json!({"doc": i, "title": CORPUS[i].title, "source": CORPUS[i].source, "score": s}))
        .collect();
    if hits.is_empty() {
        return Ok(tool_error(format!("no documents match {:?}", sq.keywords)));
    }
    let titles: Vec<&str> = hits.iter().filter_map(|h| h["title"].as_str()).collect();
    Ok(tool_result(
        format!("{} hits: {}", hits.len(), titles.join("; ")),
        json!({"step": "search", "keywords": sq.keywords, "hits": hits}),
    ))
}

/// `read`: reads every hit of the search (its dependency) and takes notes.
async fn read(ctx: TaskContext, sq: SubQuestion) -> HandlerResult {
    let search = match dependency_result(ctx.dependencies(), "search") {
        Ok(r) => r.clone(),
        Err(e) => return Ok(e),
    };
    let hits = search["structuredContent"]["hits"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut notes = Vec::new();
    for (n, hit) in hits.iter().enumerate() {
        let Some(doc) = hit["doc"].as_u64().and_then(|i| CORPUS.get(i as usize)) else {
            continue;
        };
        ctx.set_status_message(format!("reading {}/{}: {}", n + 1, hits.len(), doc.title));
        work(80).await;
        notes.push(json!({
            "title": doc.title,
            "source": doc.source,
            "excerpt": best_sentence(doc.body, &sq.keywords),
        }));
        ctx.checkpoint().await?;
    }
    Ok(tool_result(
        format!("took notes on {} sources", notes.len()),
        json!({"step": "read", "notes": notes}),
    ))
}

/// `summarize`: condenses the notes of `read` (its dependency) with citations.
async fn summarize(ctx: TaskContext, sq: SubQuestion) -> HandlerResult {
    let read = match dependency_result(ctx.dependencies(), "read") {
        Ok(r) => r.clone(),
        Err(e) => return Ok(e),
    };
    let notes = read["structuredContent"]["notes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ctx.set_status_message(format!("condensing {} notes", notes.len()));
    work(80).await;
    ctx.checkpoint().await?;
    let summary: Vec<String> = notes
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{} [{}]", n["excerpt"].as_str().unwrap_or(""), i + 1))
        .collect();
    let summary = summary.join(" ");
    ctx.set_status_message("checking citations");
    work(80).await;
    ctx.checkpoint().await?;
    let sources: Vec<Value> = notes
        .iter()
        .map(|n| json!({"title": n["title"], "source": n["source"]}))
        .collect();
    Ok(tool_result(
        summary.clone(),
        json!({"step": "summarize", "subQuestion": sq.text, "summary": summary, "sources": sources}),
    ))
}

/// One sub-question: `search -> read -> summarize`, each a subtask that starts
/// `after` the previous one and receives its outcome.
async fn research(
    ctx: TaskContext,
    sq: SubQuestion,
    started: Arc<AtomicBool>,
    labels: Labels,
) -> HandlerResult {
    started.store(true, Ordering::SeqCst);
    let tag = sq.tag.clone();
    ctx.set_status_message(format!("{tag}: planning search"));
    let s = sq.clone();
    let search_h = ctx.spawn_subtask(SubtaskOptions::default(), move |c| search(c, s))?;
    let s = sq.clone();
    let read_h = ctx.spawn_subtask(SubtaskOptions::default().after(&[&search_h]), move |c| read(c, s))?;
    let s = sq.clone();
    let summarize_h = ctx.spawn_subtask(SubtaskOptions::default().after(&[&read_h]), move |c| {
        summarize(c, s)
    })?;
    labels.set(search_h.id(), format!("{tag}/search"));
    labels.set(read_h.id(), format!("{tag}/read"));
    labels.set(summarize_h.id(), format!("{tag}/summarize"));
    let steps = json!({"search": search_h.id(), "read": read_h.id(), "summarize": summarize_h.id()});

    ctx.set_status_message(format!("{tag}: searching"));
    let _ = search_h.await;
    ctx.checkpoint().await?;
    ctx.set_status_message(format!("{tag}: reading sources"));
    let _ = read_h.await;
    ctx.checkpoint().await?;
    ctx.set_status_message(format!("{tag}: summarizing"));
    let outcome = summarize_h.await;
    ctx.checkpoint().await?;
    match outcome {
        TaskOutcome::Completed(r) if !is_error(&r) => {
            let sc = &r["structuredContent"];
            Ok(tool_result(
                format!("{}: {}", sq.text, sc["summary"].as_str().unwrap_or("")),
                json!({
                    "step": "sub-question",
                    "tag": tag,
                    "subQuestion": sq.text,
                    "summary": sc["summary"],
                    "sources": sc["sources"],
                    "steps": steps,
                }),
            ))
        }
        TaskOutcome::Completed(r) => Ok(tool_error(format!("{tag}: {}", text_of(&r)))),
        TaskOutcome::Failed(e) => Ok(tool_error(format!("{tag}: summarize failed: {}", e.message))),
        TaskOutcome::Cancelled => Ok(tool_error(format!("{tag}: summarize was cancelled"))),
    }
}

/// `synthesize`: runs after every sub-question and writes the final answer.
async fn synthesize(
    ctx: TaskContext,
    question: String,
    focus: Option<String>,
    planned: Vec<(TaskId, SubQuestion, bool)>,
) -> HandlerResult {
    ctx.set_status_message(format!(
        "collecting {} sub-question outcomes",
        ctx.dependencies().len()
    ));
    work(80).await;
    ctx.checkpoint().await?;
    let info: HashMap<TaskId, (SubQuestion, bool)> = planned
        .into_iter()
        .map(|(id, sq, focused)| (id, (sq, focused)))
        .collect();
    // Focused sub-questions first, then plan order.
    let mut deps: Vec<&DependencyOutcome> = ctx.dependencies().iter().collect();
    deps.sort_by_key(|d| !info.get(&d.id).is_some_and(|(_, f)| *f));

    let mut answer = format!("Q: {question}\n");
    if let Some(f) = &focus {
        answer.push_str(&format!("Focus (requested mid-run): {f}\n"));
    }
    let mut citations = Vec::new();
    let mut dropped = Vec::new();
    let mut n = 0;
    for d in deps {
        let (sq_text, focused) = info
            .get(&d.id)
            .map_or(("?".to_owned(), false), |(sq, f)| (sq.text.clone(), *f));
        match &d.outcome {
            TaskOutcome::Completed(r) if !is_error(r) => {
                n += 1;
                let sc = &r["structuredContent"];
                let sources: Vec<String> = sc["sources"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|s| s["title"].as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                answer.push_str(&format!(
                    "\n{n}. {sq_text}{}\n   {}\n   (sub-question task {}; sources: {})\n",
                    if focused { "  [focus]" } else { "" },
                    sc["summary"].as_str().unwrap_or(""),
                    short(d.id),
                    sources.join("; "),
                ));
                citations.push(json!({
                    "taskId": d.id,
                    "subQuestion": sq_text,
                    "steps": sc["steps"],
                    "sources": sc["sources"],
                }));
            }
            TaskOutcome::Completed(r) => {
                dropped.push(format!("{sq_text} (task {}: {})", short(d.id), text_of(r)))
            }
            TaskOutcome::Failed(e) => {
                dropped.push(format!("{sq_text} (task {} failed: {})", short(d.id), e.message))
            }
            TaskOutcome::Cancelled => {
                dropped.push(format!(
                    "{sq_text} (task {} cancelled when the plan changed)",
                    short(d.id)
                ));
            }
        }
    }
    ctx.set_status_message("writing the answer");
    work(80).await;
    ctx.checkpoint().await?;
    if !dropped.is_empty() {
        answer.push_str("\nNot covered:\n");
        for d in &dropped {
            answer.push_str(&format!("   - {d}\n"));
        }
    }
    answer.push_str("\nCitations:\n");
    for c in &citations {
        let sources: Vec<String> = c["sources"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| {
                        format!(
                            "\"{}\" ({})",
                            s["title"].as_str().unwrap_or(""),
                            s["source"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        answer.push_str(&format!(
            "   task {} (summary by task {}):\n      {}\n",
            c["taskId"].as_str().unwrap_or(""),
            c["steps"]["summarize"].as_str().unwrap_or(""),
            sources.join("\n      "),
        ));
    }
    Ok(tool_result(
        answer,
        json!({"step": "synthesize", "focus": focus, "citations": citations, "notCovered": dropped}),
    ))
}

/// A sub-question in the root's plan.
struct Planned {
    sq: SubQuestion,
    handle: SubtaskHandle,
    started: Arc<AtomicBool>,
    /// The plan entry this one waits for (its research lane).
    after: Option<usize>,
    cancelled: bool,
    focused: bool,
}

fn spawn_sub_question(
    ctx: &TaskContext,
    labels: &Labels,
    plan: &[Planned],
    sq: SubQuestion,
    after: Option<usize>,
    focused: bool,
) -> Result<Planned, ErrorObject> {
    let started = Arc::new(AtomicBool::new(false));
    let mut opts = SubtaskOptions::default();
    if let Some(i) = after {
        opts = opts.after(&[&plan[i].handle]);
    }
    let (s, st, l) = (sq.clone(), started.clone(), labels.clone());
    let handle = ctx.spawn_subtask(opts, move |c| research(c, s, st, l))?;
    labels.set(handle.id(), sq.tag.clone());
    Ok(Planned {
        sq,
        handle,
        started,
        after,
        cancelled: false,
        focused,
    })
}

/// The `deep_research` tool. `rt` is only needed to cancel a subtask: a
/// handler cannot do that through its `TaskContext` or a `SubtaskHandle`.
async fn deep_research(ctx: TaskContext, args: JsonObject, labels: Labels) -> HandlerResult {
    let question = args
        .get("question")
        .and_then(Value::as_str)
        .unwrap_or(QUESTION)
        .to_owned();
    ctx.set_status_message("planning sub-questions");
    work(120).await;
    ctx.checkpoint().await?;

    // Two research lanes: q1 and q2 start now, q3 waits for q1.
    let mut plan: Vec<Planned> = Vec::new();
    for (i, sq) in planner(&question).into_iter().enumerate() {
        let after = if i >= 2 { Some(i - 2) } else { None };
        let p = spawn_sub_question(&ctx, &labels, &plan, sq, after, false)?;
        println!(
            "{} [root] planned {} ({}){}: {}",
            ts(),
            p.sq.tag,
            short(p.handle.id()),
            after
                .map(|a| format!(" after {}", plan[a].sq.tag))
                .unwrap_or_default(),
            p.sq.text
        );
        plan.push(p);
    }

    // Steer window: the plan may change until every sub-question has started.
    let mut focus: Option<String> = None;
    let mut changes: Vec<String> = Vec::new();
    loop {
        for steer in ctx.checkpoint().await? {
            println!("{} [root] steer received at a checkpoint: {steer:?}", ts());
            let Some(f) = focus_of(&steer) else {
                println!("{} [root]   (no focus in it; plan unchanged)", ts());
                continue;
            };
            // Replace the last sub-question that has not started yet.
            let victim = plan
                .iter()
                .rposition(|p| !p.cancelled && !p.started.load(Ordering::SeqCst));
            let mut after = None;
            if let Some(v) = victim {
                let p = &mut plan[v];
                let outcome = p.handle.cancel().map_err(ErrorObject::from)?;
                p.cancelled = true;
                after = p.after;
                let change = format!(
                    "cancelled {} ({}, not started yet): {}",
                    p.sq.tag,
                    short(p.handle.id()),
                    p.sq.text
                );
                println!("{} [root]   plan change: {change} -> {outcome:?}", ts());
                changes.push(change);
            }
            let sq = sub_question_for(&f, &format!("q{}", plan.len() + 1));
            let p = spawn_sub_question(&ctx, &labels, &plan, sq, after, true)?;
            let change = format!(
                "added {} ({}){}: {}",
                p.sq.tag,
                short(p.handle.id()),
                after
                    .map(|a| format!(" after {}", plan[a].sq.tag))
                    .unwrap_or_default(),
                p.sq.text
            );
            println!("{} [root]   plan change: {change}", ts());
            changes.push(change);
            plan.push(p);
            focus = Some(f);
        }
        let waiting: Vec<&str> = plan
            .iter()
            .filter(|p| !p.cancelled && !p.started.load(Ordering::SeqCst))
            .map(|p| p.sq.tag.as_str())
            .collect();
        if waiting.is_empty() {
            break;
        }
        ctx.set_status_message(format!("researching; queued: {}", waiting.join(", ")));
        work(40).await;
    }

    // Fan in: synthesize after every sub-question (cancelled ones included:
    // their outcome tells the synthesis what is not covered).
    let handles: Vec<&SubtaskHandle> = plan.iter().map(|p| &p.handle).collect();
    let info: Vec<(TaskId, SubQuestion, bool)> = plan
        .iter()
        .map(|p| (p.handle.id(), p.sq.clone(), p.focused))
        .collect();
    let (q, f) = (question.clone(), focus.clone());
    let synth = ctx.spawn_subtask(SubtaskOptions::default().after(&handles), move |c| {
        synthesize(c, q, f, info)
    })?;
    labels.set(synth.id(), "synthesize");
    println!(
        "{} [root] plan committed; synthesize ({}) runs after {}",
        ts(),
        short(synth.id()),
        plan.iter()
            .map(|p| p.sq.tag.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    ctx.set_status_message("waiting for the synthesis");
    let synth_id = synth.id();
    match synth.await {
        TaskOutcome::Completed(r) if !is_error(&r) => Ok(tool_result(
            text_of(&r),
            json!({
                "question": question,
                "focus": focus,
                "planChanges": changes,
                "synthesisTaskId": synth_id,
                "citations": r["structuredContent"]["citations"],
            }),
        )),
        TaskOutcome::Completed(r) => Ok(tool_error(format!("synthesis failed: {}", text_of(&r)))),
        TaskOutcome::Failed(e) => Err(ErrorObject::new(
            ErrorCode::INTERNAL_ERROR,
            format!("synthesis failed: {}", e.message),
        )),
        TaskOutcome::Cancelled => Ok(tool_error("synthesis was cancelled")),
    }
}

// ----- the client -------------------------------------------------------------------

fn depth(rt: &Runtime, t: &DetailedTask) -> usize {
    let mut d = 0;
    let mut parent = t.task().parent_task_id;
    while let Some(p) = parent {
        d += 1;
        parent = rt.get(p, VIEW).and_then(|s| s.task().parent_task_id);
    }
    d
}

fn result_line(rt: &Runtime, labels: &Labels, t: &DetailedTask) -> String {
    let id = t.task().task_id;
    let summary = match t.payload() {
        TaskPayload::Completed { result } => {
            let flag = if is_error(result) { "isError: " } else { "" };
            format!("{flag}{}", clip(text_of(result), 70))
        }
        TaskPayload::Failed { error } => clip(&error.message, 70),
        _ => clip(t.task().status_message.as_deref().unwrap_or(""), 70),
    };
    let indent = "  ".repeat(depth(rt, t));
    format!(
        "{indent}{:<16} {} {:<9}  {summary}",
        labels.get(id),
        short(id),
        t.status().as_str()
    )
}

fn print_tree(rt: &Runtime, labels: &Labels, id: TaskId, depth: usize) {
    let Some(t) = rt.get(id, VIEW) else { return };
    println!(
        "           {}{:<16} {} {:<9}  {}",
        "  ".repeat(depth),
        labels.get(id),
        short(id),
        t.status().as_str(),
        clip(t.task().status_message.as_deref().unwrap_or(""), 60)
    );
    for &c in &t.task().child_task_ids {
        print_tree(rt, labels, c, depth + 1);
    }
}

fn tree(rt: &Runtime, root: TaskId) -> Vec<DetailedTask> {
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(id) = stack.pop() {
        if let Some(t) = rt.get(id, VIEW) {
            stack.extend(t.task().child_task_ids.iter().rev());
            out.push(t);
        }
    }
    out
}

/// Polls until `f` holds; fails the run if it does not within 5 s.
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        if Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        work(5).await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    START.get_or_init(Instant::now);
    let rt = Runtime::new(RuntimeConfig::default());
    let labels = Labels::default();
    {
        let l = labels.clone();
        rt.register("deep_research", move |ctx, args| {
            deep_research(ctx, args, l.clone())
        });
    }

    println!(
        "{} client> tools/call deep_research (as a task): {QUESTION:?}",
        ts()
    );
    let args = JsonObject::from_value(json!({"question": QUESTION})).expect("an object");
    let root = rt
        .start_tool("deep_research", args, RootOptions::default())
        .expect("the tool is registered");
    labels.set(root, "deep_research");
    println!("{} client> task {root} created", ts());

    // Ordered partial results, printed as they arrive.
    let printer = {
        let (rt, labels) = (rt.clone(), labels.clone());
        tokio::spawn(async move {
            let mut results = Box::pin(rt.results(root, VIEW));
            let mut last = None;
            while let Some(t) = results.next().await {
                println!("{} result  {}", ts(), result_line(&rt, &labels, &t));
                last = Some(t);
            }
            last
        })
    };

    let children = |rt: &Runtime| rt.get(root, VIEW).map_or(0, |t| t.task().child_task_ids.len());
    until("the plan", || children(&rt) == 3).await;
    work(60).await;
    println!("{} client> tasks/steer {root}: {STEER:?}", ts());
    rt.steer(root, STEER).expect("the root accepts steers");
    until("the re-plan", || children(&rt) == 4).await;

    work(150).await;
    let snap = rt.pause(root, VIEW).expect("the root can be paused");
    println!(
        "{} client> tasks/pause {root} -> {} ({})",
        ts(),
        snap.status(),
        snap.task().status_message.as_deref().unwrap_or("")
    );
    until("the whole tree to park", || {
        tree(&rt, root)
            .iter()
            .all(|t| t.status().is_terminal() || t.status() == TaskStatus::Paused)
    })
    .await;
    println!("{} client> the tree is parked:", ts());
    print_tree(&rt, &labels, root, 0);
    let before = tree(&rt, root);
    work(600).await;
    let after = tree(&rt, root);
    let changed =
        before.iter().zip(&after).filter(|(a, b)| a != b).count() + after.len().abs_diff(before.len());
    println!(
        "{} client> 600 ms later, {changed} task(s) changed while paused",
        ts()
    );
    let snap = rt.resume(root, VIEW).expect("the root is paused");
    println!("{} client> tasks/resume {root} -> {}", ts(), snap.status());

    let done = printer
        .await
        .expect("the printer ran")
        .expect("the root's result arrived last");
    assert_eq!(done.task().task_id, root);
    println!("{} client> task {root} {}\n", ts(), done.status());
    match done.payload() {
        TaskPayload::Completed { result } => {
            println!("{}", text_of(result));
            let changes = &result["structuredContent"]["planChanges"];
            println!("Plan changes: {changes}");
        }
        TaskPayload::Failed { error } => println!("failed: {}", error.message),
        other => println!("{other:?}"),
    }
}
