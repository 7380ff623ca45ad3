//! Task dependencies (`dependsOn`): the checks made when tasks are created (every dependency
//! exists, no cycle), which pending tasks are ready, and when the whole set is deadlocked.

use std::collections::{HashMap, HashSet};

use super::model::Task;
use super::status::TaskStatus;

/// Why a set of tasks cannot be created as given. Each has a stable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DependencyError {
    /// A task depends on an id that is neither in the set nor already stored.
    #[error("task `{task}` depends on unknown task `{missing}`")]
    Unknown {
        /// The depending task.
        task: String,
        /// The id that does not exist.
        missing: String,
    },
    /// The dependencies loop back on themselves (a task depending on itself included).
    #[error("tasks depend on each other in a cycle: {}", cycle.join(" -> "))]
    Cycle {
        /// The ids along the cycle, the first repeated at the end.
        cycle: Vec<String>,
    },
}

impl DependencyError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            DependencyError::Unknown { .. } => "unknown_dependency",
            DependencyError::Cycle { .. } => "dependency_cycle",
        }
    }
}

/// A cycle in the graph `id → dependencies`, as the ids along it with the first repeated at
/// the end; `None` when there is none. Edges to ids outside the graph are ignored.
/// Iterative (no recursion), so a long chain cannot overflow the stack.
pub fn find_cycle<'a>(graph: &HashMap<&'a str, Vec<&'a str>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        OnPath,
        Finished,
    }
    let mut marks: HashMap<&str, Mark> = HashMap::new();
    let mut roots: Vec<&str> = graph.keys().copied().collect();
    roots.sort_unstable();
    for root in roots {
        if marks.contains_key(root) {
            continue;
        }
        // The current path, each node with the index of its next dependency to visit.
        let mut path: Vec<(&str, usize)> = vec![(root, 0)];
        marks.insert(root, Mark::OnPath);
        while let Some((node, next)) = path.last_mut() {
            let deps = graph.get(*node).map(Vec::as_slice).unwrap_or_default();
            let Some(&dep) = deps.get(*next) else {
                marks.insert(*node, Mark::Finished);
                path.pop();
                continue;
            };
            *next += 1;
            if !graph.contains_key(dep) {
                continue;
            }
            match marks.get(dep) {
                Some(Mark::OnPath) => {
                    let start = path.iter().position(|(n, _)| *n == dep).unwrap_or(0);
                    let mut cycle: Vec<String> = path[start..].iter().map(|(n, _)| (*n).to_owned()).collect();
                    cycle.push(dep.to_owned());
                    return Some(cycle);
                }
                Some(Mark::Finished) => {}
                None => {
                    marks.insert(dep, Mark::OnPath);
                    path.push((dep, 0));
                }
            }
        }
    }
    None
}

/// Check tasks about to be created: each dependency is one of `new` or in `existing`, and
/// the dependencies of `new` together with those of `existing` form no cycle.
pub fn check_new_tasks(existing: &[Task], new: &[Task]) -> Result<(), DependencyError> {
    let known: HashSet<&str> = existing.iter().chain(new).map(|t| t.id.as_str()).collect();
    for t in new {
        if let Some(missing) = t.depends_on.iter().find(|d| !known.contains(d.as_str())) {
            return Err(DependencyError::Unknown { task: t.id.clone(), missing: missing.clone() });
        }
    }
    let graph: HashMap<&str, Vec<&str>> = existing
        .iter()
        .chain(new)
        .map(|t| (t.id.as_str(), t.depends_on.iter().map(String::as_str).collect()))
        .collect();
    match find_cycle(&graph) {
        Some(cycle) => Err(DependencyError::Cycle { cycle }),
        None => Ok(()),
    }
}

/// The ids of the `pending` tasks whose dependencies are all `done` (a dependency missing
/// from `tasks` is not done), highest priority first, then oldest, then by id. Mission
/// gates, checkpoints, delays and concurrency are the orchestrator's to apply on top.
pub fn ready(tasks: &[Task]) -> Vec<&str> {
    let status: HashMap<&str, TaskStatus> = tasks.iter().map(|t| (t.id.as_str(), t.status)).collect();
    let mut ready: Vec<&Task> = tasks
        .iter()
        .filter(|t| t.status == TaskStatus::Pending)
        .filter(|t| t.depends_on.iter().all(|d| status.get(d.as_str()) == Some(&TaskStatus::Done)))
        .collect();
    ready.sort_by(|a, b| b.priority.total_cmp(&a.priority).then(a.created_at.cmp(&b.created_at)).then(a.id.cmp(&b.id)));
    ready.into_iter().map(|t| t.id.as_str()).collect()
}

/// The deadlock condition of §5.2: some task is pending, none is ready, none is running
/// (assigned, in progress or in review), none awaits approval, and no checkpoint or delay
/// (`gates_waiting`) may yet release one.
pub fn deadlocked(tasks: &[Task], gates_waiting: bool) -> bool {
    let any = |f: fn(TaskStatus) -> bool| tasks.iter().any(|t| f(t.status));
    !gates_waiting
        && any(|s| s == TaskStatus::Pending)
        && !any(|s| matches!(s, TaskStatus::Assigned | TaskStatus::InProgress | TaskStatus::Review))
        && !any(|s| s == TaskStatus::AwaitingApproval)
        && ready(tasks).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};
    use proptest::prelude::*;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default()
    }

    fn node(i: usize) -> String {
        format!("t{i}")
    }

    /// Up to 8 tasks with random statuses and random edges among them.
    fn tasks() -> impl Strategy<Value = Vec<Task>> {
        (1usize..8).prop_flat_map(|n| {
            prop::collection::vec(
                (prop::sample::select(TaskStatus::ALL.to_vec()), prop::collection::vec(0..n, 0..3), 0u8..3),
                n,
            )
            .prop_map(|specs| {
                specs
                    .into_iter()
                    .enumerate()
                    .map(|(i, (status, deps, prio))| {
                        let mut t = Task::new(node(i), node(i), "", t0());
                        t.status = status;
                        t.depends_on = deps.into_iter().map(node).collect();
                        t.priority = f64::from(prio);
                        t
                    })
                    .collect()
            })
        })
    }

    /// Brute force: a node is on a cycle when it reaches itself in the transitive closure.
    fn has_cycle_brute(tasks: &[Task]) -> bool {
        let n = tasks.len();
        let index: HashMap<&str, usize> = tasks.iter().enumerate().map(|(i, t)| (t.id.as_str(), i)).collect();
        let mut reach = vec![vec![false; n]; n];
        for (i, t) in tasks.iter().enumerate() {
            for d in &t.depends_on {
                reach[i][index[d.as_str()]] = true;
            }
        }
        for k in 0..n {
            for i in 0..n {
                for j in 0..n {
                    reach[i][j] = reach[i][j] || (reach[i][k] && reach[k][j]);
                }
            }
        }
        (0..n).any(|i| reach[i][i])
    }

    proptest! {
        /// Cycle detection agrees with the transitive closure, and a reported cycle is real.
        #[test]
        fn cycle_detection_agrees_with_brute_force(tasks in tasks()) {
            let result = check_new_tasks(&[], &tasks);
            prop_assert_eq!(result.is_err(), has_cycle_brute(&tasks));
            if let Err(DependencyError::Cycle { cycle }) = result {
                prop_assert_eq!(cycle.first(), cycle.last());
                let by_id: HashMap<&str, &Task> = tasks.iter().map(|t| (t.id.as_str(), t)).collect();
                for edge in cycle.windows(2) {
                    prop_assert!(by_id[edge[0].as_str()].depends_on.contains(&edge[1]));
                }
            }
        }

        /// Readiness lists exactly the pending tasks whose every dependency is done, in
        /// priority order.
        #[test]
        fn ready_never_lists_a_task_with_an_unfinished_dependency(tasks in tasks()) {
            let listed = ready(&tasks);
            let by_id: HashMap<&str, &Task> = tasks.iter().map(|t| (t.id.as_str(), t)).collect();
            for id in &listed {
                let t = by_id[id];
                prop_assert_eq!(t.status, TaskStatus::Pending);
                prop_assert!(t.depends_on.iter().all(|d| by_id[d.as_str()].status == TaskStatus::Done));
            }
            let expected = tasks.iter().filter(|t| {
                t.status == TaskStatus::Pending && t.depends_on.iter().all(|d| by_id[d.as_str()].status == TaskStatus::Done)
            }).count();
            prop_assert_eq!(listed.len(), expected);
            prop_assert!(listed.windows(2).all(|w| by_id[w[0]].priority >= by_id[w[1]].priority));
        }
    }

    #[test]
    fn unknown_dependencies_and_self_loops_are_refused() {
        let mut a = Task::new("a", "A", "", t0());
        a.depends_on = vec!["ghost".into()];
        assert_eq!(check_new_tasks(&[], &[a.clone()]).unwrap_err().code(), "unknown_dependency");
        a.depends_on = vec!["a".into()];
        assert_eq!(
            check_new_tasks(&[], &[a.clone()]).unwrap_err(),
            DependencyError::Cycle { cycle: vec!["a".into(), "a".into()] }
        );
        let b = Task::new("b", "B", "", t0());
        a.depends_on = vec!["b".into()];
        check_new_tasks(&[b], &[a]).unwrap();
    }

    #[test]
    fn a_long_chain_is_checked_without_recursion() {
        let tasks: Vec<Task> = (0..50_000)
            .map(|i| {
                let mut t = Task::new(node(i), node(i), "", t0());
                if i > 0 {
                    t.depends_on = vec![node(i - 1)];
                }
                t
            })
            .collect();
        check_new_tasks(&[], &tasks).unwrap();
    }

    #[test]
    fn a_pending_task_behind_a_failed_one_is_a_deadlock() {
        let mut failed = Task::new("a", "A", "", t0());
        failed.status = TaskStatus::Failed;
        let mut blocked = Task::new("b", "B", "", t0());
        blocked.depends_on = vec!["a".into()];
        let set = vec![failed.clone(), blocked.clone()];
        assert!(ready(&set).is_empty());
        assert!(deadlocked(&set, false));
        assert!(!deadlocked(&set, true), "a delay still running may release it");
        let mut waiting = failed;
        waiting.status = TaskStatus::AwaitingApproval;
        assert!(!deadlocked(&[waiting, blocked], false));
    }
}
