//! `deep_research`: a simulated research agent over the built-in corpus,
//! run as a tree of subtasks.
//!
//! * The root plans up to `breadth` sub-questions by keyword scoring (see
//!   the private `corpus` module) and runs them in two lanes: sub-question *n*
//!   starts `after` sub-question *n - 2*, so later ones stay queued a while.
//! * Each sub-question task runs `search -> read -> summarize` subtasks,
//!   chained with `after` (each step reads the previous one's outcome from
//!   `ctx.dependencies()`), then, while `depth` allows, spawns follow-up
//!   sub-questions one level down (at most `max(1, breadth / 2)` each).
//! * A steer "focus on X" re-plans: sub-questions that have not started and
//!   do not match X are cancelled, matching ones are added, and follow-ups
//!   chosen later must match X. Every change shows in a status message and
//!   in the result's `planChanges`.
//! * A `synthesize` subtask runs `after` every top-level sub-question and
//!   writes the answer, citing sub-question tasks by id and sources as `[Sn]`.
//!
//! Steps sleep 100-300 ms and checkpoint in between, so a run is watchable,
//! pausable and steerable; `pace` multiplies every sleep (`"pace": 20`
//! makes a run last about 40 seconds, slow enough to steer by hand).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::corpus::{self, DOCUMENTS, SubQuestion, focus_of, plan, plan_focus, terms};
use super::{Args, invalid_params};
use crate::model::{ErrorCode, ErrorObject, JsonObject, TaskId};
use crate::runtime::{HandlerResult, SubtaskHandle, SubtaskOptions, TaskContext, TaskError, TaskOutcome};
use crate::server::structured_result;
use crate::server::{TaskSupport, ToolCall, ToolOutcome, ToolSpec, error_result};

/// The tool's name.
pub const NAME: &str = "deep_research";
/// Largest `breadth`.
pub const MAX_BREADTH: u64 = 6;
/// Largest `depth`.
pub const MAX_DEPTH: u64 = 3;
/// Longest `question`, in characters.
pub const MAX_QUESTION_CHARS: usize = 1000;
/// Largest `pace`.
pub const MAX_PACE: u64 = 100;

/// Top-level sub-questions researched at once.
const LANES: usize = 2;

/// The validated arguments of a `deep_research` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResearchArgs {
    /// The question.
    pub question: String,
    /// Top-level sub-questions to plan.
    pub breadth: u32,
    /// Levels of sub-questions (1: no follow-ups).
    pub depth: u32,
    /// Slow-down factor of every step (1: full speed, a few seconds in all;
    /// 20: about 40 seconds, slow enough to watch, steer and pause by hand).
    pub pace: u32,
}

impl ResearchArgs {
    /// Validates `arguments`.
    ///
    /// # Errors
    ///
    /// `-32602` naming the offending argument.
    pub fn parse(arguments: &JsonObject) -> Result<Self, ErrorObject> {
        let a = Args::new(NAME, arguments, &["question", "breadth", "depth", "pace"])?;
        let question = a.string("question")?.map(str::trim).unwrap_or_default();
        if question.is_empty() {
            return Err(invalid_params(format!(
                "{NAME}: question is required (a non-empty string)"
            )));
        }
        if question.chars().count() > MAX_QUESTION_CHARS {
            return Err(invalid_params(format!(
                "{NAME}: question must be at most {MAX_QUESTION_CHARS} characters"
            )));
        }
        Ok(ResearchArgs {
            question: question.to_owned(),
            breadth: a.int("breadth", Some(3), 1, MAX_BREADTH)?.unwrap_or(3) as u32,
            depth: a.int("depth", Some(2), 1, MAX_DEPTH)?.unwrap_or(2) as u32,
            pace: a.int("pace", Some(1), 1, MAX_PACE)?.unwrap_or(1) as u32,
        })
    }
}

/// How `deep_research` is listed.
pub fn spec() -> ToolSpec {
    let topics: Vec<&str> = corpus::TOPICS.iter().map(|t| t.name).collect();
    let description = format!(
        "Researches a question in a small built-in corpus (offline; topics: {}) as a tree of subtasks: \
         plans up to `breadth` sub-questions, runs search -> read -> summarize subtasks for each (read \
         after search, summarize after read), follows up one level deeper while `depth` allows, and \
         writes an answer citing its subtasks (task ids) and sources. Steer the root with \"focus on \
         <subject>\" to re-plan: queued sub-questions that do not match are cancelled and matching ones \
         added. Status messages report progress; pause and resume take effect between steps. Task \
         support is optional: clients without the tasks extension get the answer synchronously, after \
         a few seconds. Resumable: after a server restart the research resumes where it stopped; \
         finished subtasks and steps (the search and model calls) are not run again.",
        topics.join(", ")
    );
    let schema = json!({
        "type": "object",
        "properties": {
            "question": {
                "type": "string", "minLength": 1, "maxLength": MAX_QUESTION_CHARS,
                "description": "The question to research."
            },
            "breadth": {
                "type": "integer", "minimum": 1, "maximum": MAX_BREADTH, "default": 3,
                "description": "Top-level sub-questions to plan; each sub-question follows up on at \
                                most max(1, breadth / 2) more."
            },
            "depth": {
                "type": "integer", "minimum": 1, "maximum": MAX_DEPTH, "default": 2,
                "description": "Levels of sub-questions: 1 plans only top-level ones, each further \
                                level adds follow-ups."
            },
            "pace": {
                "type": "integer", "minimum": 1, "maximum": MAX_PACE, "default": 1,
                "description": "Slow-down factor of every step: 1 runs at full speed (a few seconds \
                                in all); 20 takes about 40 seconds, enough to watch, steer and pause \
                                the tree by hand."
            }
        },
        "required": ["question"],
        "additionalProperties": false
    });
    ToolSpec::new(NAME, &description, schema, TaskSupport::Optional).resumable()
}

/// A sub-question as a step's output stores it (the corpus's names are
/// looked up again when it is read back).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredSq {
    question: String,
    keywords: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    facet: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    topic: Option<String>,
}

impl StoredSq {
    fn of(sq: &SubQuestion) -> Self {
        StoredSq {
            question: sq.question.clone(),
            keywords: sq.keywords.clone(),
            facet: sq.facet.map(str::to_owned),
            topic: sq.topic.map(str::to_owned),
        }
    }

    fn into_sq(self) -> SubQuestion {
        SubQuestion {
            question: self.question,
            keywords: self.keywords,
            facet: self.facet.as_deref().and_then(corpus::facet).map(|f| f.id),
            topic: self.topic.as_deref().and_then(corpus::topic).map(|t| t.id),
        }
    }
}

/// Answers a `deep_research` call: an `isError` result for bad arguments, otherwise a
/// task running the research.
pub async fn call(call: ToolCall) -> ToolOutcome {
    match ResearchArgs::parse(&call.arguments) {
        Ok(args) => ToolOutcome::task(move |ctx| root(ctx, args)),
        Err(e) => ToolOutcome::tool_error(e.message),
    }
}

// ----- findings (the structured content of subtasks) -------------------------------

/// A note `read` took on one source.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Note {
    doc_id: String,
    title: String,
    source: String,
    excerpt: String,
}

/// The steps of a sub-question.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Steps {
    search: TaskId,
    read: TaskId,
    summarize: TaskId,
}

/// The `structuredContent` of a sub-question task.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Finding {
    label: String,
    task_id: TaskId,
    question: String,
    level: u32,
    /// Why it is incomplete; `None` when it completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(default)]
    summary: String,
    #[serde(default)]
    notes: Vec<Note>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    steps: Option<Steps>,
    #[serde(default)]
    follow_ups: Vec<Finding>,
    #[serde(default)]
    steers: Vec<String>,
}

impl Finding {
    fn missing(label: &str, task_id: TaskId, question: &str, level: u32, reason: String) -> Self {
        Finding {
            label: label.to_owned(),
            task_id,
            question: question.to_owned(),
            level,
            reason: Some(reason),
            summary: String::new(),
            notes: Vec::new(),
            steps: None,
            follow_ups: Vec::new(),
            steers: Vec::new(),
        }
    }
}

/// The `structuredContent` of a completed, non-error result.
fn content<T: for<'de> Deserialize<'de>>(outcome: &TaskOutcome) -> Option<T> {
    match outcome {
        TaskOutcome::Completed(r) if !is_error(r) => {
            serde_json::from_value(r.get("structuredContent")?.clone()).ok()
        }
        _ => None,
    }
}

fn text_of(result: &JsonObject) -> &str {
    result
        .get("content")
        .and_then(|c| c[0]["text"].as_str())
        .unwrap_or("")
}

fn is_error(result: &JsonObject) -> bool {
    result.get("isError").and_then(Value::as_bool).unwrap_or(false)
}

/// Why an outcome has no usable result.
fn why(outcome: &TaskOutcome) -> String {
    match outcome {
        TaskOutcome::Completed(r) => text_of(r).to_owned(),
        TaskOutcome::Failed(e) => format!("failed: {}", e.message),
        TaskOutcome::Cancelled => "cancelled".to_owned(),
    }
}

/// Sleeps `ms` milliseconds slowed down by `pace`: the stand-in for a call
/// to a search engine or a model, so the handler gives its scheduler slot
/// back meanwhile ([`TaskContext::external`]).
async fn pause_ms(ctx: &TaskContext, pace: u32, ms: u64) {
    let ms = ms.saturating_mul(u64::from(pace));
    ctx.external(tokio::time::sleep(Duration::from_millis(ms))).await;
}

// ----- the plan ----------------------------------------------------------------------

/// Where a sub-question is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Queued,
    Searching,
    Reading,
    Summarizing,
    FollowingUp,
    Done,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Queued => "queued",
            Phase::Searching => "searching",
            Phase::Reading => "reading",
            Phase::Summarizing => "summarizing",
            Phase::FollowingUp => "following up",
            Phase::Done => "done",
        }
    }
}

/// A sub-question in the plan.
struct Entry {
    label: String,
    sq: SubQuestion,
    handle: SubtaskHandle,
    top_level: bool,
    phase: Arc<Mutex<Phase>>,
    /// Cancelled by a re-plan.
    dropped: bool,
    /// Added for a focus.
    focused: bool,
}

#[derive(Default)]
struct Plan {
    entries: Vec<Entry>,
    /// Facets planned so far (never planned twice).
    claimed: HashSet<&'static str>,
    focus: Option<String>,
    focus_terms: Vec<String>,
    changes: Vec<String>,
}

struct Shared {
    args: ResearchArgs,
    plan: Mutex<Plan>,
}

impl Shared {
    /// Why a sub-question that did not complete is missing.
    fn reason(&self, id: TaskId, outcome: &TaskOutcome) -> String {
        let dropped = self
            .plan
            .lock()
            .entries
            .iter()
            .any(|e| e.handle.id() == id && e.dropped);
        match outcome {
            TaskOutcome::Cancelled if dropped => "cancelled when the plan changed".to_owned(),
            TaskOutcome::Completed(r) => content::<Finding>(outcome)
                .and_then(|f| f.reason)
                .unwrap_or_else(|| text_of(r).to_owned()),
            other => why(other),
        }
    }
}

/// Spawns a sub-question as a subtask of `ctx` and enters it in the plan.
fn spawn_sub_question(
    ctx: &TaskContext,
    shared: &Arc<Shared>,
    sq: SubQuestion,
    label: String,
    level: u32,
    after: Option<&SubtaskHandle>,
    focused: bool,
) -> Result<SubtaskHandle, TaskError> {
    let phase = Arc::new(Mutex::new(Phase::Queued));
    let opts = SubtaskOptions::default()
        .after(&after.into_iter().collect::<Vec<_>>())
        .named(format!("sub-question {label}"))
        .args(&sq.question);
    let (s, l, p, sh) = (sq.clone(), label.clone(), phase.clone(), shared.clone());
    let handle = ctx.spawn_subtask(opts, move |c| research(c, sh, s, l, level, p))?;
    let mut plan = shared.plan.lock();
    plan.claimed.extend(sq.facet);
    let entry = Entry {
        label,
        sq,
        handle: handle.clone(),
        top_level: level == 1,
        phase,
        dropped: false,
        focused,
    };
    plan.entries.push(entry);
    Ok(handle)
}

/// Spawns a top-level sub-question in the next lane; returns its label.
fn spawn_top_level(
    ctx: &TaskContext,
    shared: &Arc<Shared>,
    sq: SubQuestion,
    focused: bool,
) -> Result<String, TaskError> {
    let (label, after) = {
        let plan = shared.plan.lock();
        let tops: Vec<&Entry> = plan.entries.iter().filter(|e| e.top_level).collect();
        let after = tops.len().checked_sub(LANES).map(|i| tops[i].handle.clone());
        (format!("q{}", tops.len() + 1), after)
    };
    let h = spawn_sub_question(ctx, shared, sq, label.clone(), 1, after.as_ref(), focused)?;
    Ok(format!("{label} (task {})", h.id()))
}

/// What a steer changes in the plan: decided once, as a step, since it
/// depends on which sub-questions have started (a re-run takes the same
/// decision).
#[derive(Debug, Serialize, Deserialize)]
struct Replan {
    /// Labels of the queued sub-questions to cancel.
    victims: Vec<String>,
    /// Sub-questions to add.
    additions: Vec<StoredSq>,
}

/// Applies a steer to the plan (see the module docs).
async fn replan(ctx: &TaskContext, shared: &Arc<Shared>, steer: &str) -> Result<(), TaskError> {
    let Some(focus) = focus_of(steer) else {
        let change = format!("steer {steer:?} noted; it names no focus (\"focus on ...\"), plan unchanged");
        ctx.set_status_message(change.clone());
        shared.plan.lock().changes.push(change);
        return Ok(());
    };
    let focus_terms = terms(&focus);
    let decide = || {
        let plan = shared.plan.lock();
        let mut victims = Vec::new();
        let mut covered = false;
        for e in plan.entries.iter().filter(|e| !e.dropped) {
            if e.sq.matches(&focus_terms) {
                covered = true;
            } else if *e.phase.lock() == Phase::Queued {
                victims.push(e.label.clone());
            }
        }
        let mut additions = plan_focus(&focus, &plan.claimed, victims.len().max(1));
        if covered && additions.iter().all(|a| a.facet.is_none()) {
            additions.clear();
        }
        let additions = additions.iter().map(StoredSq::of).collect();
        std::future::ready(Replan { victims, additions })
    };
    let decision: Replan = ctx.step(&format!("replan for {focus:?}"), decide).await?;
    let victims: Vec<(String, SubtaskHandle, String)> = {
        let mut plan = shared.plan.lock();
        plan.focus = Some(focus.clone());
        plan.focus_terms = focus_terms.clone();
        plan.entries
            .iter_mut()
            .filter(|e| !e.dropped && decision.victims.contains(&e.label))
            .map(|e| {
                e.dropped = true;
                (e.label.clone(), e.handle.clone(), e.sq.question.clone())
            })
            .collect()
    };
    let mut changes = Vec::new();
    for (label, handle, question) in &victims {
        // One that started since the decision is cancelled all the same.
        let _ = handle.cancel();
        changes.push(format!(
            "cancelled {label} (task {}, not started): {question}",
            handle.id()
        ));
    }
    for sq in decision.additions {
        let sq = sq.into_sq();
        let question = sq.question.clone();
        let label = spawn_top_level(ctx, shared, sq, true)?;
        changes.push(format!("added {label}: {question}"));
    }
    if changes.is_empty() {
        changes.push("nothing queued to change; follow-ups will keep to the focus".to_owned());
    }
    ctx.set_status_message(format!("re-planned for focus {focus:?}: {}", changes.join("; ")));
    let mut plan = shared.plan.lock();
    plan.changes
        .extend(changes.into_iter().map(|c| format!("focus {focus:?}: {c}")));
    Ok(())
}

// ----- the root ------------------------------------------------------------------------

async fn root(ctx: TaskContext, args: ResearchArgs) -> HandlerResult {
    let shared = Arc::new(Shared {
        args: args.clone(),
        plan: Mutex::default(),
    });
    let n = DOCUMENTS.len();
    ctx.set_status_message(format!("planning: scoring {n} documents against the question"));
    // The (simulated) model call that plans: a durable step.
    ctx.step("plan", || pause_ms(&ctx, args.pace, 200)).await?;
    let mut pending = ctx.checkpoint().await?;
    let planned = plan(&args.question, args.breadth as usize);
    let list: Vec<&str> = planned.iter().map(|s| s.question.as_str()).collect();
    ctx.set_status_message(format!(
        "planned {} sub-questions: {}",
        list.len(),
        list.join(" | ")
    ));
    for sq in planned {
        spawn_top_level(&ctx, &shared, sq, false)?;
    }
    pause_ms(&ctx, args.pace, 150).await;

    // Research until every top-level sub-question is done, re-planning on
    // steers. The turns this loop takes depend only on what the root saw
    // (`ended`, recorded by a step each turn), never on timing it did not
    // record, so a re-run after a restart takes the same turns and takes
    // the same steers at the same checkpoints.
    let mut steers = Vec::new();
    let mut ended: HashSet<TaskId> = HashSet::new();
    loop {
        pending.extend(ctx.checkpoint().await?);
        for steer in pending.drain(..) {
            replan(&ctx, &shared, &steer).await?;
            steers.push(steer);
            pause_ms(&ctx, args.pace, 200).await;
        }
        let (next, status) = {
            let plan = shared.plan.lock();
            let open: Vec<&Entry> = plan
                .entries
                .iter()
                .filter(|e| e.top_level && !e.dropped && !ended.contains(&e.handle.id()))
                .collect();
            let status: Vec<String> = open
                .iter()
                .map(|e| format!("{} {}", e.label, e.phase.lock().as_str()))
                .collect();
            let next = open.first().map(|e| (e.handle.clone(), e.phase.clone()));
            (next, status)
        };
        let Some((next, phase)) = next else { break };
        ctx.set_status_message(format!("researching: {}", status.join(", ")));
        // Wake at least every 250 ms to take steers; a sub-question cancelled
        // before it ran never marks itself done, so its outcome does.
        let done: bool = ctx
            .step("wait for a sub-question", || async {
                tokio::select! {
                    _ = next.outcome() => true,
                    () = pause_ms(&ctx, 1, 250) => false,
                }
            })
            .await?;
        if done {
            *phase.lock() = Phase::Done;
            ended.insert(next.id());
        }
    }

    // Fan in: the synthesis runs after every top-level sub-question.
    let (handles, planned, changes, focus) = {
        let plan = shared.plan.lock();
        let tops = plan.entries.iter().filter(|e| e.top_level);
        let handles: Vec<SubtaskHandle> = tops.clone().map(|e| e.handle.clone()).collect();
        let planned: Vec<(TaskId, bool)> = tops.map(|e| (e.handle.id(), e.focused)).collect();
        (handles, planned, plan.changes.clone(), plan.focus.clone())
    };
    let after: Vec<&SubtaskHandle> = handles.iter().collect();
    let (sh, q, f) = (shared.clone(), args.question.clone(), focus.clone());
    let synth = ctx.spawn_subtask(
        SubtaskOptions::default().after(&after).named("synthesize"),
        move |c| synthesize(c, sh, q, f, planned, changes),
    )?;
    let synth_id = synth.id();
    ctx.set_status_message(format!("synthesizing the answer (task {synth_id})"));
    let outcome = synth.await;
    let late = ctx.checkpoint().await?;
    let result = match outcome {
        TaskOutcome::Completed(r) if !is_error(&r) => r,
        TaskOutcome::Completed(r) => return Ok(r),
        TaskOutcome::Failed(e) => {
            let message = format!("synthesis failed: {}", e.message);
            return Err(ErrorObject::new(ErrorCode::INTERNAL_ERROR, message));
        }
        TaskOutcome::Cancelled => return Ok(error_result("the synthesis subtask was cancelled")),
    };
    let mut text = text_of(&result).to_owned();
    for steer in &late {
        text.push_str(&format!(
            "\nNote: steer {steer:?} arrived after the research finished; not applied.\n"
        ));
    }
    steers.extend(late);
    let mut structured = result["structuredContent"].clone();
    structured["synthesisTaskId"] = json!(synth_id);
    structured["steers"] = json!(steers);
    structured["breadth"] = json!(args.breadth);
    structured["depth"] = json!(args.depth);
    ctx.set_status_message("answer ready");
    Ok(structured_result(text, structured))
}

// ----- sub-questions and their steps ---------------------------------------------------

/// Up to `max(1, breadth / 2)` unclaimed follow-ups of `sq` (matching the
/// focus, if any), claimed here so that sibling sub-questions do not repeat them.
fn choose_follow_ups(shared: &Shared, sq: &SubQuestion) -> Vec<SubQuestion> {
    let Some(f) = sq.facet.and_then(corpus::facet) else {
        return Vec::new();
    };
    let limit = (shared.args.breadth as usize / 2).max(1);
    let mut plan = shared.plan.lock();
    let picks: Vec<&'static corpus::Facet> = f
        .follow_ups
        .iter()
        .filter_map(|id| corpus::facet(id))
        .filter(|g| !plan.claimed.contains(g.id))
        .filter(|g| plan.focus_terms.is_empty() || corpus::score_facet(g, &plan.focus_terms) > 0)
        .take(limit)
        .collect();
    plan.claimed.extend(picks.iter().map(|g| g.id));
    picks.into_iter().map(SubQuestion::from_facet).collect()
}

/// One sub-question: `search -> read -> summarize`, then follow-ups.
fn research(
    ctx: TaskContext,
    shared: Arc<Shared>,
    sq: SubQuestion,
    label: String,
    level: u32,
    phase: Arc<Mutex<Phase>>,
) -> BoxFuture<'static, HandlerResult> {
    Box::pin(async move {
        /// Marks the sub-question done however its body ends (also when
        /// interrupted by a cancel).
        struct DoneOnDrop(Arc<Mutex<Phase>>);
        impl Drop for DoneOnDrop {
            fn drop(&mut self) {
                *self.0.lock() = Phase::Done;
            }
        }
        let _done = DoneOnDrop(phase.clone());
        let set = |p: Phase| *phase.lock() = p;
        set(Phase::Searching);
        let scope = sq
            .topic
            .and_then(corpus::topic)
            .map_or("the whole corpus", |t| t.name);
        ctx.set_status_message(format!("{label}: searching {scope}: {}", sq.question));
        let s = sq.clone();
        let pace = shared.args.pace;
        let search = ctx.spawn_subtask(SubtaskOptions::default().named("search"), move |c| {
            search(c, s, pace)
        })?;
        let s = sq.clone();
        let read = ctx.spawn_subtask(
            SubtaskOptions::default().after(&[&search]).named("read"),
            move |c| read(c, s, pace),
        )?;
        let summarize = ctx.spawn_subtask(
            SubtaskOptions::default().after(&[&read]).named("summarize"),
            move |c| summarize(c, pace),
        )?;
        let steps = Steps {
            search: search.id(),
            read: read.id(),
            summarize: summarize.id(),
        };
        let mut steers = Vec::new();
        search.await;
        steers.extend(ctx.checkpoint().await?);
        set(Phase::Reading);
        ctx.set_status_message(format!("{label}: reading the sources found"));
        read.await;
        steers.extend(ctx.checkpoint().await?);
        set(Phase::Summarizing);
        ctx.set_status_message(format!("{label}: summarizing"));
        let outcome = summarize.await;
        steers.extend(ctx.checkpoint().await?);
        let mut finding = Finding::missing(&label, ctx.task_id(), &sq.question, level, String::new());
        finding.steps = Some(steps);
        match content::<Value>(&outcome) {
            Some(v) => {
                finding.reason = None;
                finding.summary = v["summary"].as_str().unwrap_or_default().to_owned();
                finding.notes = serde_json::from_value(v["notes"].clone()).unwrap_or_default();
            }
            None => finding.reason = Some(format!("summarize: {}", why(&outcome))),
        }

        if finding.reason.is_none() && !finding.notes.is_empty() && level < shared.args.depth {
            let mut handles: Vec<(String, String, SubtaskHandle)> = Vec::new();
            // Which follow-ups a sub-question claims depends on which of its
            // siblings got there first: a step, so a re-run claims the same.
            let picked: Vec<StoredSq> = ctx
                .step("choose follow-ups", || {
                    let picked = choose_follow_ups(&shared, &sq).iter().map(StoredSq::of).collect();
                    std::future::ready(picked)
                })
                .await?;
            let picked: Vec<SubQuestion> = picked.into_iter().map(StoredSq::into_sq).collect();
            shared
                .plan
                .lock()
                .claimed
                .extend(picked.iter().filter_map(|f| f.facet));
            for (i, f) in picked.into_iter().enumerate() {
                let (l, q) = (format!("{label}.{}", i + 1), f.question.clone());
                let after = handles.last().map(|(_, _, h)| h.clone());
                let h = spawn_sub_question(&ctx, &shared, f, l.clone(), level + 1, after.as_ref(), false)?;
                handles.push((l, q, h));
            }
            if !handles.is_empty() {
                set(Phase::FollowingUp);
                let names: Vec<String> = handles.iter().map(|(l, q, _)| format!("{l} {q}")).collect();
                ctx.set_status_message(format!("{label}: following up: {}", names.join(" | ")));
            }
            for (l, q, h) in handles {
                let id = h.id();
                let o = h.await;
                steers.extend(ctx.checkpoint().await?);
                let missing = || Finding::missing(&l, id, &q, level + 1, shared.reason(id, &o));
                finding.follow_ups.push(content(&o).unwrap_or_else(missing));
            }
        }
        finding.steers = steers;
        let text = match &finding.reason {
            None => format!("{label}: {}\n{}", sq.question, finding.summary),
            Some(r) => format!("{label}: {r}"),
        };
        ctx.set_status_message(format!("{label}: done"));
        Ok(structured_result(
            text,
            serde_json::to_value(&finding).expect("serializable"),
        ))
    })
}

/// The result of the step this one runs `after`, or (as `Err`) a tool error
/// saying why this step is skipped.
fn upstream(ctx: &TaskContext, step: &str) -> Result<Value, JsonObject> {
    match ctx.dependencies().first().map(|d| &d.outcome) {
        Some(o) => content::<Value>(o).ok_or_else(|| error_result(format!("skipped: {step}: {}", why(o)))),
        None => Err(error_result(format!("skipped: no {step} step"))),
    }
}

/// `search`: ranks the documents of the sub-question's topic.
async fn search(ctx: TaskContext, sq: SubQuestion, pace: u32) -> HandlerResult {
    let pool = DOCUMENTS
        .iter()
        .filter(|d| sq.topic.is_none_or(|t| d.topic == t))
        .count();
    ctx.set_status_message(format!("searching: {}", sq.keywords.join(", ")));
    for first in (1..=pool).step_by(4) {
        ctx.checkpoint().await?;
        let last = (first + 3).min(pool);
        ctx.set_status_message(format!("searching: scanning documents {first}-{last} of {pool}"));
        ctx.step(&format!("scan {first}-{last}"), || pause_ms(&ctx, pace, 100))
            .await?;
    }
    let hits = corpus::search(&sq.keywords, sq.topic, 3);
    let titles: Vec<&str> = hits.iter().map(|(d, _)| d.title).collect();
    ctx.set_status_message(format!("found {} sources", hits.len()));
    let hits: Vec<Value> = hits
        .iter()
        .map(|(d, s)| json!({"docId": d.id, "title": d.title, "score": s}))
        .collect();
    let text = format!("{} hits: {}", hits.len(), titles.join("; "));
    Ok(structured_result(
        text,
        json!({"keywords": sq.keywords, "hits": hits}),
    ))
}

/// `read`: reads the hits of `search` and takes notes.
async fn read(ctx: TaskContext, sq: SubQuestion, pace: u32) -> HandlerResult {
    let found = match upstream(&ctx, "search") {
        Ok(v) => v,
        Err(e) => return Ok(e),
    };
    let hits = found["hits"].as_array().map_or(&[][..], Vec::as_slice);
    let docs: Vec<_> = hits
        .iter()
        .filter_map(|h| h["docId"].as_str().and_then(corpus::document))
        .collect();
    ctx.set_status_message(format!("reading {} sources", docs.len()));
    pause_ms(&ctx, pace, 150).await;
    let mut notes = Vec::new();
    for (i, d) in docs.iter().enumerate() {
        ctx.checkpoint().await?;
        ctx.set_status_message(format!("reading {}/{}: {}", i + 1, docs.len(), d.title));
        // The (simulated) model call that reads a source: a durable step.
        let note: Note = ctx
            .step(&format!("read {}", d.id), || async {
                pause_ms(&ctx, pace, 200).await;
                Note {
                    doc_id: d.id.into(),
                    title: d.title.into(),
                    source: d.source.into(),
                    excerpt: corpus::excerpt(&d.body, &sq.keywords, 2),
                }
            })
            .await?;
        notes.push(note);
    }
    let text = format!("took notes on {} sources", notes.len());
    Ok(structured_result(text, json!({"notes": notes})))
}

/// `summarize`: condenses the notes of `read`, citing them.
async fn summarize(ctx: TaskContext, pace: u32) -> HandlerResult {
    let notes: Vec<Note> = match upstream(&ctx, "read") {
        Ok(v) => serde_json::from_value(v["notes"].clone()).unwrap_or_default(),
        Err(e) => return Ok(e),
    };
    ctx.checkpoint().await?;
    ctx.set_status_message(format!("condensing {} notes", notes.len()));
    ctx.step("condense", || pause_ms(&ctx, pace, 200)).await?;
    ctx.checkpoint().await?;
    ctx.set_status_message("checking citations");
    ctx.step("check citations", || pause_ms(&ctx, pace, 100)).await?;
    let summary = if notes.is_empty() {
        "No document in the corpus addresses this.".to_owned()
    } else {
        let cited: Vec<String> = notes
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{} [{}]", n.excerpt, i + 1))
            .collect();
        cited.join(" ")
    };
    Ok(structured_result(
        summary.clone(),
        json!({"summary": summary, "notes": notes}),
    ))
}

// ----- synthesis ------------------------------------------------------------------------

/// A cited source of the answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Citation {
    #[serde(rename = "ref")]
    cite: String,
    doc_id: String,
    title: String,
    source: String,
    cited_by: Vec<TaskId>,
}

/// `synthesize`: runs after every top-level sub-question (`planned`, with
/// whether each was added for the focus) and writes the answer.
async fn synthesize(
    ctx: TaskContext,
    shared: Arc<Shared>,
    question: String,
    focus: Option<String>,
    planned: Vec<(TaskId, bool)>,
    changes: Vec<String>,
) -> HandlerResult {
    let pace = shared.args.pace;
    ctx.set_status_message(format!(
        "collecting {} sub-question outcomes",
        ctx.dependencies().len()
    ));
    pause_ms(&ctx, pace, 150).await;
    ctx.checkpoint().await?;
    // Focused sub-questions first, then plan order; follow-ups after their parent.
    let mut order = planned.clone();
    order.sort_by_key(|(_, focused)| !focused);
    let mut stack: Vec<(Finding, Option<TaskId>, bool)> = Vec::new();
    for (id, focused) in order.into_iter().rev() {
        let Some(dep) = ctx.dependencies().iter().find(|d| d.id == id) else {
            continue;
        };
        let label = shared
            .plan
            .lock()
            .entries
            .iter()
            .find(|e| e.handle.id() == id)
            .map(|e| (e.label.clone(), e.sq.question.clone()));
        let (label, q) = label.unwrap_or_default();
        let missing = || Finding::missing(&label, id, &q, 1, shared.reason(id, &dep.outcome));
        stack.push((content(&dep.outcome).unwrap_or_else(missing), None, focused));
    }
    let (mut sub_questions, mut not_covered, mut citations) =
        (Vec::new(), Vec::new(), Vec::<Citation>::new());
    let mut findings = String::new();
    let mut gist = Vec::new();
    while let Some((f, parent, focused)) = stack.pop() {
        for fu in f.follow_ups.iter().rev() {
            stack.push((fu.clone(), Some(f.task_id), focused));
        }
        let reason = f.reason.clone().or_else(|| {
            f.notes
                .is_empty()
                .then(|| "no document in the corpus addresses it".into())
        });
        if let Some(reason) = reason {
            not_covered.push(
                json!({"label": f.label, "taskId": f.task_id, "question": f.question, "reason": reason}),
            );
            continue;
        }
        let mut sources = Vec::new();
        let mut cited = Vec::new();
        for n in &f.notes {
            let i = citations
                .iter()
                .position(|c| c.doc_id == n.doc_id)
                .unwrap_or_else(|| {
                    let cite = format!("S{}", citations.len() + 1);
                    let (doc_id, title, source) = (n.doc_id.clone(), n.title.clone(), n.source.clone());
                    citations.push(Citation {
                        cite,
                        doc_id,
                        title,
                        source,
                        cited_by: Vec::new(),
                    });
                    citations.len() - 1
                });
            let c = &mut citations[i];
            c.cited_by.push(f.task_id);
            sources.push(json!({"ref": c.cite, "docId": c.doc_id, "title": c.title, "source": c.source}));
            cited.push(format!("{} [{}]", n.excerpt, c.cite));
        }
        if f.level == 1 && gist.len() < 3 {
            let first = f.notes[0]
                .excerpt
                .split_inclusive(". ")
                .next()
                .unwrap_or_default();
            gist.push(format!(
                "{} [{}]",
                first.trim(),
                sources[0]["ref"].as_str().unwrap_or("?")
            ));
        }
        let summary = cited.join(" ");
        let indent = "   ".repeat(f.level.saturating_sub(1) as usize);
        let steps = f
            .steps
            .as_ref()
            .map(|s| format!("; summarized by task {}", s.summarize))
            .unwrap_or_default();
        findings.push_str(&format!(
            "{indent}{}. {}{}\n{indent}   {summary}\n{indent}   (task {}{steps})\n",
            f.label,
            f.question,
            if focused { " [focus]" } else { "" },
            f.task_id,
        ));
        sub_questions.push(json!({
            "taskId": f.task_id, "label": f.label, "question": f.question, "level": f.level,
            "parentTaskId": parent, "focused": focused, "summary": summary, "sources": sources,
            "steps": f.steps,
        }));
    }
    ctx.set_status_message(format!(
        "writing the answer from {} sub-questions",
        sub_questions.len()
    ));
    // The (simulated) model call that writes the answer: a durable step.
    ctx.step("write the answer", || pause_ms(&ctx, pace, 200)).await?;
    ctx.checkpoint().await?;

    let mut t = format!("Question: {question}\n");
    if let Some(f) = &focus {
        t.push_str(&format!("Focus: {f} (steered mid-run)\n"));
    }
    if sub_questions.is_empty() {
        let topics: Vec<&str> = corpus::TOPICS.iter().map(|t| t.name).collect();
        t.push_str(&format!(
            "\nThe built-in corpus has nothing on this. It covers {}.\n",
            topics.join(", ")
        ));
    } else {
        t.push_str(&format!("\nIn short: {}\n\nFindings\n{findings}", gist.join(" ")));
    }
    if !changes.is_empty() {
        t.push_str("\nPlan changes\n");
        changes.iter().for_each(|c| t.push_str(&format!("  - {c}\n")));
    }
    if !not_covered.is_empty() {
        t.push_str("\nNot covered\n");
        for m in &not_covered {
            let s = |k: &str| m[k].as_str().unwrap_or_default().to_owned();
            t.push_str(&format!(
                "  - {} {} (task {}): {}\n",
                s("label"),
                s("question"),
                s("taskId"),
                s("reason")
            ));
        }
    }
    if !citations.is_empty() {
        t.push_str("\nSources\n");
        for c in &citations {
            let by: Vec<String> = c.cited_by.iter().map(TaskId::to_string).collect();
            t.push_str(&format!(
                "  [{}] \"{}\", {} (cited by task {})\n",
                c.cite,
                c.title,
                c.source,
                by.join(", task ")
            ));
        }
    }
    let structured = json!({
        "question": question, "focus": focus, "subQuestions": sub_questions, "citations": citations,
        "notCovered": not_covered, "planChanges": changes,
    });
    Ok(structured_result(t, structured))
}
