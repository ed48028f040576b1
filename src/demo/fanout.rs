//! `fanout`: a synthetic tree of subtasks for trying and testing the runtime.
//!
//! The root has path `0`; the children of node `p` are `p.0`, `p.1`, ...
//! Every node, in order:
//!
//! 1. spawns its `width` children (unless it is `depth` levels below the root);
//! 2. if it is the `inputAt` node, asks for input under key `confirm-<path>`
//!    (any answer continues);
//! 3. runs `steps` steps of `stepMs` milliseconds, each preceded by a
//!    checkpoint (where a pause takes effect and steer messages arrive);
//! 4. awaits its children in order (supervise: a failed child is listed, not
//!    propagated), takes a last checkpoint;
//! 5. returns a `CallToolResult` whose `structuredContent` is
//!    `{path, steps, steers, children, failed, cancelled, nodes}`, or, if it
//!    is the `failAt` node, fails with `-32603`.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::{Args, invalid_params};
use crate::model::{ErrorCode, ErrorObject, JsonObject};
use crate::runtime::{HandlerResult, SubtaskOptions, TaskContext, TaskOutcome};
use crate::server::structured_result;
use crate::server::{TaskSupport, ToolCall, ToolOutcome, ToolSpec, elicitation};

/// The tool's name.
pub const NAME: &str = "fanout";
/// Largest `width`.
pub const MAX_WIDTH: u64 = 50;
/// Largest `depth`.
pub const MAX_DEPTH: u64 = 6;
/// Largest `steps`.
pub const MAX_STEPS: u64 = 1000;
/// Largest `stepMs`.
pub const MAX_STEP_MS: u64 = 60_000;
/// Largest number of nodes in the tree (`1 + width + ... + width^depth`).
pub const MAX_NODES: u64 = 10_000;
/// Largest `ttlMs` (one day).
pub const MAX_TTL_MS: u64 = 86_400_000;

const KNOWN: &[&str] = &["width", "depth", "steps", "stepMs", "failAt", "inputAt", "ttlMs"];

/// The validated arguments of a `fanout` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FanoutArgs {
    /// Children per node.
    pub width: u32,
    /// Levels below the root.
    pub depth: u32,
    /// Steps per node.
    pub steps: u32,
    /// Milliseconds per step.
    pub step_ms: u64,
    /// The node that fails after its steps.
    pub fail_at: Option<String>,
    /// The node that asks for input before its steps.
    pub input_at: Option<String>,
    /// TTL of the root task.
    pub ttl_ms: Option<u64>,
}

impl Default for FanoutArgs {
    fn default() -> Self {
        FanoutArgs {
            width: 2,
            depth: 1,
            steps: 3,
            step_ms: 50,
            fail_at: None,
            input_at: None,
            ttl_ms: None,
        }
    }
}

/// Nodes of a tree with `width` children per node and `depth` levels below
/// the root, saturating.
pub fn node_count(width: u64, depth: u64) -> u64 {
    let mut total: u64 = 0;
    let mut level: u64 = 1;
    for _ in 0..=depth {
        total = total.saturating_add(level);
        level = level.saturating_mul(width);
    }
    total
}

impl FanoutArgs {
    /// Validates `arguments`.
    ///
    /// # Errors
    ///
    /// `-32602` naming the offending argument: an unknown name, a wrong type,
    /// a value out of range, too many nodes, or a path naming no node.
    pub fn parse(arguments: &JsonObject) -> Result<Self, ErrorObject> {
        let a = Args::new(NAME, arguments, KNOWN)?;
        let d = FanoutArgs::default();
        let width = a
            .int("width", Some(d.width.into()), 0, MAX_WIDTH)?
            .unwrap_or_default();
        let depth = a
            .int("depth", Some(d.depth.into()), 0, MAX_DEPTH)?
            .unwrap_or_default();
        let steps = a
            .int("steps", Some(d.steps.into()), 0, MAX_STEPS)?
            .unwrap_or_default();
        let step_ms = a
            .int("stepMs", Some(d.step_ms), 0, MAX_STEP_MS)?
            .unwrap_or_default();
        let ttl_ms = a.int("ttlMs", None, 1, MAX_TTL_MS)?;
        let nodes = node_count(width, depth);
        if nodes > MAX_NODES {
            return Err(invalid_params(format!(
                "{NAME}: width {width} and depth {depth} make {} nodes; at most {MAX_NODES} are allowed",
                if nodes == u64::MAX {
                    "too many".to_owned()
                } else {
                    nodes.to_string()
                }
            )));
        }
        let args = FanoutArgs {
            width: width as u32,
            depth: depth as u32,
            steps: steps as u32,
            step_ms,
            fail_at: a.string("failAt")?.map(str::to_owned),
            input_at: a.string("inputAt")?.map(str::to_owned),
            ttl_ms,
        };
        for (key, path) in [("failAt", &args.fail_at), ("inputAt", &args.input_at)] {
            if let Some(p) = path {
                args.check_path(key, p)?;
            }
        }
        Ok(args)
    }

    /// Checks that `path` names a node of this tree.
    fn check_path(&self, key: &str, path: &str) -> Result<(), ErrorObject> {
        let mut segments = path.split('.');
        let well_formed = segments.next() == Some("0")
            && path
                .split('.')
                .skip(1)
                .all(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
        if !well_formed {
            return Err(invalid_params(format!(
                "{NAME}: {key} must be a node path such as \"0\" (the root) or \"0.1\" (its second child), \
                 got {path:?}"
            )));
        }
        let levels = path.split('.').count() - 1;
        let fits = levels <= self.depth as usize
            && path
                .split('.')
                .skip(1)
                .all(|s| s.parse::<u64>().is_ok_and(|i| i < u64::from(self.width)));
        if !fits {
            return Err(invalid_params(format!(
                "{NAME}: {key} {path:?} names no node: with width {} and depth {}, child indices run \
                 from 0 to {} and paths have at most {} levels below \"0\"",
                self.width,
                self.depth,
                self.width.saturating_sub(1),
                self.depth
            )));
        }
        Ok(())
    }
}

/// How `fanout` is listed.
pub fn spec() -> ToolSpec {
    let path_pattern = "^0(\\.[0-9]+)*$";
    ToolSpec::new(
        NAME,
        "A synthetic tree of subtasks for trying the tasks runtime. Every node spawns `width` \
         children (down to `depth` levels below the root), runs `steps` steps of `stepMs` ms with a \
         checkpoint before each (where pause takes effect and steer messages arrive), waits for its \
         children and returns structuredContent {path, steps, steers, children, failed, cancelled, \
         nodes}. Node paths: the root is \"0\", its children \"0.0\", \"0.1\", and so on. `failAt` \
         makes one node fail with a JSON-RPC error after its steps (its parent lists it and \
         completes); `inputAt` makes one node ask for input with key \"confirm-<path>\" before its \
         steps (any answer continues). At most 10000 nodes. Task support is optional: clients that \
         declared the tasks extension get a task tree to watch, steer and pause; other clients get \
         the root's result synchronously. Resumable: after a server restart a running fanout tree \
         resumes where it stopped (finished nodes and steps are not run again; running nodes run \
         again in place).",
        json!({
            "type": "object",
            "properties": {
                "width": {
                    "type": "integer", "minimum": 0, "maximum": MAX_WIDTH, "default": 2,
                    "description": "Children per node."
                },
                "depth": {
                    "type": "integer", "minimum": 0, "maximum": MAX_DEPTH, "default": 1,
                    "description": "Levels below the root (0: the root alone). 1 + width + ... + \
                                    width^depth must not exceed 10000."
                },
                "steps": {
                    "type": "integer", "minimum": 0, "maximum": MAX_STEPS, "default": 3,
                    "description": "Steps each node runs; a checkpoint precedes each step."
                },
                "stepMs": {
                    "type": "integer", "minimum": 0, "maximum": MAX_STEP_MS, "default": 50,
                    "description": "Milliseconds each step takes."
                },
                "failAt": {
                    "type": "string", "pattern": path_pattern,
                    "description": "Path of the node that fails with error -32603 \"fanout node <path> \
                                    failed as requested\" after its steps, e.g. \"0.1\"."
                },
                "inputAt": {
                    "type": "string", "pattern": path_pattern,
                    "description": "Path of the node that asks for input under key \"confirm-<path>\" \
                                    (a form elicitation) before its steps; any answer continues. Needs \
                                    a client that declared the tasks extension."
                },
                "ttlMs": {
                    "type": "integer", "minimum": 1, "maximum": MAX_TTL_MS,
                    "description": "TTL of the root task in milliseconds (the server's default when \
                                    absent)."
                }
            },
            "additionalProperties": false
        }),
        TaskSupport::Optional,
    )
    .resumable()
}

/// Answers a `fanout` call: an `isError` result for bad arguments, otherwise a task
/// running the tree (with the requested TTL).
pub async fn call(call: ToolCall) -> ToolOutcome {
    let args = match FanoutArgs::parse(&call.arguments) {
        Ok(a) => a,
        Err(e) => return ToolOutcome::tool_error(e.message),
    };
    if args.input_at.is_some() && !call.tasks_declared() {
        return ToolOutcome::tool_error(format!(
            "{NAME}: inputAt needs a client that takes the call as a task (the 2026-07-28 tasks \
             extension, or a 2025-11-25 task-augmented call): the answer arrives through the task"
        ));
    }
    let ttl = args.ttl_ms;
    let args = Arc::new(args);
    let body = move |ctx| node(ctx, args, "0".to_owned(), 0);
    match ttl {
        Some(ttl) => ToolOutcome::task_with_ttl(ttl, body),
        None => ToolOutcome::task(body),
    }
}

/// What a node learned from its children.
#[derive(Default)]
struct Fold {
    children: Vec<Value>,
    failed: Vec<String>,
    cancelled: Vec<String>,
    nodes: u64,
}

impl Fold {
    fn add(&mut self, path: String, id: crate::model::TaskId, outcome: TaskOutcome) {
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
                .unwrap_or_default()
        };
        match outcome {
            TaskOutcome::Completed(r) => {
                let sc = &r["structuredContent"];
                self.failed.extend(strings(&sc["failed"]));
                self.cancelled.extend(strings(&sc["cancelled"]));
                self.nodes += sc["nodes"].as_u64().unwrap_or(1);
                self.children
                    .push(json!({"path": path, "taskId": id, "status": "completed"}));
            }
            TaskOutcome::Failed(e) => {
                self.children
                    .push(json!({"path": path, "taskId": id, "status": "failed", "error": e}));
                self.failed.push(path);
            }
            TaskOutcome::Cancelled => {
                self.children
                    .push(json!({"path": path, "taskId": id, "status": "cancelled"}));
                self.cancelled.push(path);
            }
        }
    }
}

/// One node of the tree (boxed: nodes spawn nodes).
fn node(
    ctx: TaskContext,
    args: Arc<FanoutArgs>,
    path: String,
    level: u32,
) -> BoxFuture<'static, HandlerResult> {
    Box::pin(async move {
        let mut children = Vec::new();
        if level < args.depth {
            for i in 0..args.width {
                let child = format!("{path}.{i}");
                let (a, p) = (args.clone(), child.clone());
                let opts = SubtaskOptions::default().named(format!("node {child}"));
                let h = ctx.spawn_subtask(opts, move |c| node(c, a, p, level + 1))?;
                children.push((child, h));
            }
        }

        let mut input = Value::Null;
        if args.input_at.as_deref() == Some(path.as_str()) {
            let key = format!("confirm-{path}");
            ctx.set_status_message(format!("node {path}: waiting for input {key:?}"));
            let request = elicitation(
                &format!("fanout node {path} asks before running its steps: continue?"),
                json!({"confirm": {"type": "boolean", "title": "Continue", "default": true}}),
                &[],
            );
            input = ctx.request_input(key, request).await?.to_value();
        }

        let mut steers: Vec<String> = Vec::new();
        for step in 1..=args.steps {
            steers.extend(ctx.checkpoint().await?);
            ctx.set_status_message(format!("node {path}: step {step}/{}", args.steps));
            // A step's work stands for a wait on something outside the
            // runtime (a model, a remote service): the slot goes back
            // meanwhile. A durable step: after a restart a finished one is
            // not run again.
            let ms = args.step_ms;
            ctx.step(&format!("step {step}"), || {
                ctx.external(tokio::time::sleep(Duration::from_millis(ms)))
            })
            .await?;
        }

        let mut fold = Fold {
            nodes: 1,
            ..Fold::default()
        };
        let total = children.len();
        for (done, (child, h)) in children.into_iter().enumerate() {
            ctx.set_status_message(format!("node {path}: waiting for children ({done}/{total} done)"));
            let id = h.id();
            let outcome = h.await;
            fold.add(child, id, outcome);
        }
        steers.extend(ctx.checkpoint().await?);

        if args.fail_at.as_deref() == Some(path.as_str()) {
            return Err(ErrorObject::new(
                ErrorCode::INTERNAL_ERROR,
                format!("{NAME} node {path} failed as requested"),
            ));
        }

        let completed = fold
            .children
            .iter()
            .filter(|c| c["status"] == "completed")
            .count();
        let mut text = if level == 0 {
            format!(
                "fanout: {} of {} nodes completed. ",
                fold.nodes,
                node_count(args.width.into(), args.depth.into())
            )
        } else {
            String::new()
        };
        let s = if args.steps == 1 { "" } else { "s" };
        text.push_str(&format!(
            "node {path}: ran {} step{s}; {completed}/{total} children completed",
            args.steps
        ));
        if !fold.failed.is_empty() {
            text.push_str(&format!("; failed: {}", fold.failed.join(", ")));
        }
        if !fold.cancelled.is_empty() {
            text.push_str(&format!("; cancelled: {}", fold.cancelled.join(", ")));
        }
        if steers.is_empty() {
            text.push_str("; no steer messages");
        } else {
            text.push_str(&format!("; steer messages: {}", steers.join(" | ")));
        }
        ctx.set_status_message(format!("node {path}: done"));
        let mut structured = json!({
            "path": path,
            "steps": args.steps,
            "steers": steers,
            "children": fold.children,
            "failed": fold.failed,
            "cancelled": fold.cancelled,
            "nodes": fold.nodes,
        });
        if !input.is_null() {
            structured["input"] = input;
        }
        Ok(structured_result(text, structured))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<FanoutArgs, ErrorObject> {
        FanoutArgs::parse(&JsonObject::from_value(v).unwrap())
    }

    fn message(v: Value) -> String {
        let e = parse(v).unwrap_err();
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
        e.message
    }

    #[test]
    fn defaults() {
        assert_eq!(parse(json!({})).unwrap(), FanoutArgs::default());
        let a =
            parse(json!({"width": 3, "depth": 2, "steps": 0, "stepMs": 0, "failAt": "0.2.1", "ttlMs": 500}))
                .unwrap();
        assert_eq!(
            (a.width, a.depth, a.steps, a.step_ms, a.ttl_ms),
            (3, 2, 0, 0, Some(500))
        );
        assert_eq!(a.fail_at.as_deref(), Some("0.2.1"));
    }

    #[test]
    fn node_counts() {
        assert_eq!(node_count(2, 2), 7);
        assert_eq!(node_count(0, 6), 1);
        assert_eq!(node_count(10, 4), 11_111);
        assert_eq!(node_count(50, 6), 15_943_877_551);
    }

    #[test]
    fn ranges_and_types() {
        assert!(message(json!({"width": 51})).contains("width must be from 0 to 50, got 51"));
        assert!(message(json!({"depth": 7})).contains("depth must be from 0 to 6"));
        assert!(message(json!({"steps": 1001})).contains("steps must be from 0 to 1000"));
        assert!(message(json!({"stepMs": 60001})).contains("stepMs"));
        assert!(message(json!({"ttlMs": 0})).contains("ttlMs must be from 1"));
        assert!(message(json!({"width": "2"})).contains("width must be an integer"));
        assert!(message(json!({"steps": -1})).contains("steps must be an integer"));
        assert!(message(json!({"failAt": 1})).contains("failAt must be a string"));
        assert!(message(json!({"widht": 2})).contains("unknown argument \"widht\""));
    }

    #[test]
    fn too_many_nodes() {
        let m = message(json!({"width": 10, "depth": 4}));
        assert!(m.contains("make 11111 nodes; at most 10000"), "{m}");
        assert!(parse(json!({"width": 50, "depth": 2})).is_ok());
        assert!(message(json!({"width": 50, "depth": 6})).contains("at most 10000"));
    }

    #[test]
    fn paths() {
        assert!(parse(json!({"failAt": "0"})).is_ok());
        assert!(parse(json!({"inputAt": "0.1"})).is_ok());
        for bad in ["", "1", "0.", "0..1", "0.a", "00", "0.-1", " 0"] {
            let m = message(json!({"failAt": bad}));
            assert!(m.contains("must be a node path"), "{bad:?}: {m}");
        }
        let m = message(json!({"inputAt": "0.2"}));
        assert!(m.contains("names no node"), "{m}");
        assert!(message(json!({"failAt": "0.0.0"})).contains("names no node"));
        assert!(message(json!({"width": 0, "failAt": "0.0"})).contains("names no node"));
    }
}
