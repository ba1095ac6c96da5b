//! A workflow's task graph by index (docs/workflows.md, "Tasks and dependencies").
//!
//! Task `i` of a [`Dag`] is `tasks[i]` of its workflow. Edges point from a task to its direct
//! upstream (`depends_on`) and, mirrored, to its direct downstream. Invariants: a `Dag` built
//! with [`Dag::of`] from a validated spec is acyclic and its edge lists hold no duplicates;
//! every index is below [`Dag::len`].

use crate::workflow::spec::{TriggerRule, WorkflowSpec};

/// The task graph of one workflow version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dag {
    upstream: Vec<Vec<usize>>,
    downstream: Vec<Vec<usize>>,
    rules: Vec<TriggerRule>,
}

impl Dag {
    /// The graph of a workflow. A `depends_on` entry that names no task is left out (a
    /// validated spec has none).
    pub fn of(spec: &WorkflowSpec) -> Dag {
        let index: std::collections::HashMap<&str, usize> = spec
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.as_str(), i))
            .collect();
        let upstream = spec
            .tasks
            .iter()
            .map(|t| {
                t.depends_on
                    .iter()
                    .filter_map(|d| index.get(d.as_str()).copied())
                    .collect()
            })
            .collect();
        Dag::from_parts(
            upstream,
            spec.tasks.iter().map(|t| t.trigger_rule).collect(),
        )
    }

    /// A graph from each task's direct upstream indices and its trigger rule. Indices out of
    /// range and repeated ones are dropped.
    ///
    /// # Panics
    /// Never; `rules` shorter than `upstream` is padded with `all_success`.
    pub fn from_parts(upstream: Vec<Vec<usize>>, mut rules: Vec<TriggerRule>) -> Dag {
        let n = upstream.len();
        rules.resize(n, TriggerRule::AllSuccess);
        let mut downstream = vec![Vec::new(); n];
        let upstream: Vec<Vec<usize>> = upstream
            .into_iter()
            .enumerate()
            .map(|(i, ups)| {
                let mut seen = Vec::with_capacity(ups.len());
                for u in ups {
                    if u < n && !seen.contains(&u) {
                        seen.push(u);
                        downstream[u].push(i);
                    }
                }
                seen
            })
            .collect();
        Dag {
            upstream,
            downstream,
            rules,
        }
    }

    /// Number of tasks.
    pub fn len(&self) -> usize {
        self.upstream.len()
    }

    /// True for a graph without tasks.
    pub fn is_empty(&self) -> bool {
        self.upstream.is_empty()
    }

    /// Task `i`'s direct upstream.
    pub fn upstream(&self, i: usize) -> &[usize] {
        &self.upstream[i]
    }

    /// Task `i`'s direct downstream.
    pub fn downstream(&self, i: usize) -> &[usize] {
        &self.downstream[i]
    }

    /// Task `i`'s trigger rule.
    pub fn rule(&self, i: usize) -> TriggerRule {
        self.rules[i]
    }

    /// Every task reachable downstream of `from` (the tasks of `from` included), as a mask
    /// indexed by task.
    pub fn downstream_closure(&self, from: impl IntoIterator<Item = usize>) -> Vec<bool> {
        closure(&self.downstream, from)
    }

    /// Every task `i` depends on, directly or transitively (`i` itself excluded unless on a
    /// cycle), as a mask indexed by task.
    pub fn ancestors(&self, i: usize) -> Vec<bool> {
        closure(&self.upstream, self.upstream[i].iter().copied())
    }

    /// The tasks in an order where each comes after all its upstream, and of the tasks ready
    /// at one point the first written first (Kahn's algorithm with a min-heap of indices);
    /// `None` on a cycle.
    pub fn topological_order(&self) -> Option<Vec<usize>> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let mut missing: Vec<usize> = self.upstream.iter().map(Vec::len).collect();
        let mut ready: BinaryHeap<Reverse<usize>> = (0..self.len())
            .filter(|&i| missing[i] == 0)
            .map(Reverse)
            .collect();
        let mut order = Vec::with_capacity(self.len());
        while let Some(Reverse(i)) = ready.pop() {
            order.push(i);
            for &d in &self.downstream[i] {
                missing[d] -= 1;
                if missing[d] == 0 {
                    ready.push(Reverse(d));
                }
            }
        }
        (order.len() == self.len()).then_some(order)
    }
}

fn closure(edges: &[Vec<usize>], from: impl IntoIterator<Item = usize>) -> Vec<bool> {
    let mut seen = vec![false; edges.len()];
    let mut stack: Vec<usize> = from.into_iter().filter(|&i| i < edges.len()).collect();
    while let Some(i) = stack.pop() {
        if !std::mem::replace(&mut seen[i], true) {
            stack.extend(edges[i].iter().copied().filter(|&j| !seen[j]));
        }
    }
    seen
}

/// A cycle found by [`find_cycles`]: the edge that closes it and the tasks along it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    /// The task whose `depends_on` entry closes the cycle.
    pub task: usize,
    /// That entry's position in the task's `depends_on`.
    pub position: usize,
    /// The tasks along the cycle, starting and ending at `task`, following `depends_on`.
    pub path: Vec<usize>,
}

/// The cycles of a graph given as each task's `depends_on` entries `(position, upstream)`,
/// one per edge that closes a cycle in a depth-first walk from task 0 on; empty for a DAG.
/// Iterative, so a chain of any length cannot overflow the stack.
pub fn find_cycles(depends_on: &[Vec<(usize, usize)>]) -> Vec<Cycle> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let n = depends_on.len();
    let mut mark = vec![Mark::New; n];
    let mut cycles = Vec::new();
    for root in 0..n {
        if mark[root] != Mark::New {
            continue;
        }
        // (task, next edge to look at)
        let mut path: Vec<(usize, usize)> = vec![(root, 0)];
        mark[root] = Mark::OnPath;
        while let Some(&mut (task, ref mut next)) = path.last_mut() {
            let Some(&(position, up)) = depends_on[task].get(*next) else {
                mark[task] = Mark::Done;
                path.pop();
                continue;
            };
            *next += 1;
            if up >= n {
                continue;
            }
            match mark[up] {
                Mark::New => {
                    mark[up] = Mark::OnPath;
                    path.push((up, 0));
                }
                Mark::OnPath => {
                    let start = path.iter().position(|&(t, _)| t == up).unwrap_or(0);
                    let mut tasks = vec![task];
                    tasks.extend(path[start..path.len() - 1].iter().map(|&(t, _)| t));
                    tasks.push(task);
                    cycles.push(Cycle {
                        task,
                        position,
                        path: tasks,
                    });
                }
                Mark::Done => {}
            }
        }
    }
    cycles
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edges(lists: &[&[usize]]) -> Vec<Vec<(usize, usize)>> {
        lists
            .iter()
            .map(|l| l.iter().copied().enumerate().collect())
            .collect()
    }

    #[test]
    fn a_two_task_cycle_is_spelled_from_the_edge_that_closes_it() {
        // extract depends on load, load depends on extract (the example of docs/workflows.md).
        let cycles = find_cycles(&edges(&[&[1], &[0]]));
        assert_eq!(
            cycles,
            vec![Cycle {
                task: 1,
                position: 0,
                path: vec![1, 0, 1]
            }]
        );
    }

    #[test]
    fn a_self_dependency_is_a_cycle_of_one() {
        let cycles = find_cycles(&edges(&[&[], &[0, 1]]));
        assert_eq!(
            cycles,
            vec![Cycle {
                task: 1,
                position: 1,
                path: vec![1, 1]
            }]
        );
    }

    #[test]
    fn a_diamond_has_no_cycle_and_a_topological_order() {
        let lists = edges(&[&[], &[0], &[0], &[1, 2]]);
        assert!(find_cycles(&lists).is_empty());
        let dag = Dag::from_parts(vec![vec![], vec![0], vec![0], vec![1, 2]], vec![]);
        let order = dag.topological_order().unwrap();
        let pos = |t| order.iter().position(|&x| x == t).unwrap();
        assert!(pos(0) < pos(1) && pos(1) < pos(3) && pos(2) < pos(3));
        assert_eq!(dag.downstream_closure([1]), vec![false, true, false, true]);
        assert_eq!(dag.ancestors(3), vec![true, true, true, false]);
    }

    #[test]
    fn a_long_chain_does_not_overflow_the_stack() {
        let n = 100_000;
        let mut lists: Vec<Vec<(usize, usize)>> = (0..n)
            .map(|i| if i == 0 { vec![] } else { vec![(0, i - 1)] })
            .collect();
        assert!(find_cycles(&lists).is_empty());
        lists[0] = vec![(0, n - 1)];
        let cycles = find_cycles(&lists);
        assert_eq!(cycles.len(), 1);
        assert_eq!(cycles[0].path.len(), n + 1);
    }
}
