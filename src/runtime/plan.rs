//! Dependencies among sibling subtasks: `after` validation and plans.
//!
//! A [`SubtaskPlan`] declares named steps with `after` edges; spawning it
//! checks the graph (a cycle is rejected with the steps on it)
//! and starts the steps in a topological order, each with `after` set to
//! its dependencies, so every step starts only when its dependencies are
//! terminal and receives their outcomes.

use std::collections::{HashMap, VecDeque};
use std::future::Future;

use super::context::{HandlerBody, HandlerResult, SubtaskHandle, SubtaskOptions, TaskContext, TaskError};
use super::error::RuntimeError;

struct Step {
    name: String,
    after: Vec<String>,
    opts: SubtaskOptions,
    body: HandlerBody,
}

/// A set of named sibling subtasks with dependencies among them (a DAG).
///
/// # Examples
///
/// ```no_run
/// # use subtask::runtime::{SubtaskPlan, SubtaskOptions, TaskContext};
/// # use subtask::model::JsonObject;
/// # async fn demo(ctx: TaskContext) -> Result<(), subtask::runtime::TaskError> {
/// let mut plan = SubtaskPlan::new();
/// plan.step("search", &[], SubtaskOptions::default(), |_ctx| async { Ok(JsonObject::new()) });
/// plan.step("read", &["search"], SubtaskOptions::default(), |ctx| async move {
///     let _search = &ctx.dependencies()[0];
///     Ok(JsonObject::new())
/// });
/// let handles = plan.spawn(&ctx)?;
/// let read = handles["read"].clone().await;
/// # Ok(()) }
/// ```
#[derive(Default)]
pub struct SubtaskPlan {
    steps: Vec<Step>,
}

impl std::fmt::Debug for SubtaskPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.steps.iter().map(|s| (&s.name, &s.after)))
            .finish()
    }
}

impl SubtaskPlan {
    /// An empty plan.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a step that starts after the named steps.
    pub fn step<F, Fut>(&mut self, name: &str, after: &[&str], opts: SubtaskOptions, f: F) -> &mut Self
    where
        F: FnOnce(TaskContext) -> Fut + Send + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.steps.push(Step {
            name: name.to_owned(),
            after: after.iter().map(|s| (*s).to_owned()).collect(),
            opts,
            body: Box::new(move |ctx| Box::pin(f(ctx))),
        });
        self
    }

    /// The order the steps will be created in, or the cycle that prevents one.
    ///
    /// # Errors
    ///
    /// `DependencyCycle` naming the steps on a cycle; `InvalidDependency`-like
    /// `DependencyCycle` with one name for an `after` naming an unknown step.
    pub fn order(&self) -> Result<Vec<usize>, RuntimeError> {
        let index: HashMap<&str, usize> = self
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect();
        let n = self.steps.len();
        // Edges dependency -> dependent; Kahn's algorithm, ties in declaration order.
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut waiting_on = vec![0usize; n];
        for (i, s) in self.steps.iter().enumerate() {
            for dep in &s.after {
                let Some(&d) = index.get(dep.as_str()) else {
                    return Err(RuntimeError::DependencyCycle {
                        steps: vec![format!("unknown step {dep:?}")],
                    });
                };
                dependents[d].push(i);
                waiting_on[i] += 1;
            }
        }
        let mut ready: VecDeque<usize> = (0..n).filter(|&i| waiting_on[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = ready.pop_front() {
            order.push(i);
            for &j in &dependents[i] {
                waiting_on[j] -= 1;
                if waiting_on[j] == 0 {
                    ready.push_back(j);
                }
            }
        }
        if order.len() == n {
            return Ok(order);
        }
        // What Kahn left holds the cycles and the steps downstream of them;
        // pruning, in reverse, the steps none of the rest depends on leaves
        // the steps on a cycle (and any between two cycles).
        let mut left: Vec<bool> = waiting_on.iter().map(|&w| w > 0).collect();
        loop {
            let prunable: Vec<usize> = (0..n)
                .filter(|&i| left[i] && !dependents[i].iter().any(|&j| left[j]))
                .collect();
            if prunable.is_empty() {
                break;
            }
            for i in prunable {
                left[i] = false;
            }
        }
        Err(RuntimeError::DependencyCycle {
            steps: (0..n)
                .filter(|&i| left[i])
                .map(|i| self.steps[i].name.clone())
                .collect(),
        })
    }

    /// Creates every step as a subtask of `ctx`'s task, dependencies first.
    ///
    /// # Errors
    ///
    /// `Rejected(DependencyCycle)` before anything is created; otherwise the
    /// errors of [`TaskContext::spawn_subtask`].
    pub fn spawn(self, ctx: &TaskContext) -> Result<HashMap<String, SubtaskHandle>, TaskError> {
        let order = self.order().map_err(TaskError::Rejected)?;
        let mut steps: Vec<Option<Step>> = self.steps.into_iter().map(Some).collect();
        let mut handles: HashMap<String, SubtaskHandle> = HashMap::new();
        for i in order {
            let Some(step) = steps[i].take() else { continue };
            let mut opts = step.opts;
            for dep in &step.after {
                opts.after.push(handles[dep].id());
            }
            let handle = ctx.spawn_body(opts, step.body)?;
            handles.insert(step.name, handle);
        }
        Ok(handles)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JsonObject;

    fn plan(steps: &[(&str, &[&str])]) -> SubtaskPlan {
        let mut plan = SubtaskPlan::new();
        for (name, after) in steps {
            plan.step(name, after, SubtaskOptions::default(), |_| async {
                Ok(JsonObject::new())
            });
        }
        plan
    }

    fn names(p: &SubtaskPlan, order: Vec<usize>) -> Vec<&str> {
        order.into_iter().map(|i| p.steps[i].name.as_str()).collect()
    }

    #[test]
    fn steps_come_after_their_dependencies_in_declaration_order_otherwise() {
        let p = plan(&[
            ("read", &["search"]),
            ("search", &[]),
            ("rank", &[]),
            ("write", &["read", "rank"]),
        ]);
        assert_eq!(names(&p, p.order().unwrap()), ["search", "rank", "read", "write"]);
    }

    #[test]
    fn a_cycle_is_named_without_the_steps_around_it() {
        let p = plan(&[
            ("a", &[]),
            ("b", &["a", "d"]),
            ("c", &["b"]),
            ("d", &["c"]),
            ("after_cycle", &["d"]),
        ]);
        match p.order() {
            Err(RuntimeError::DependencyCycle { steps }) => assert_eq!(steps, ["b", "c", "d"]),
            other => panic!("{other:?}"),
        }
        let p = plan(&[("self", &["self"])]);
        assert!(matches!(p.order(), Err(RuntimeError::DependencyCycle { steps }) if steps == ["self"]));
        let p = plan(&[("x", &["nope"])]);
        assert!(
            matches!(p.order(), Err(RuntimeError::DependencyCycle { steps }) if steps[0].contains("nope"))
        );
    }
}
