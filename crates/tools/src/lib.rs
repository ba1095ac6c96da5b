//! The tools beside the server: `sundial bench` (the built-in load generator and its reports,
//! README.md "Sizing with sundial bench", figures in BENCHMARKS.md) and `sundial demo` (a
//! server on an embedded store firing the examples). They drive the server as a user would,
//! through its processes, its HTTP API and the store's traits: nothing here writes SQL.

#[macro_use]
extern crate sundial_server;

pub mod bench;
mod bench_apply;
mod bench_capacity;
mod bench_history;
mod bench_load;
mod bench_nodes;
mod bench_report;
mod bench_workflow;
pub mod demo;
