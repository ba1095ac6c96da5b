//! The command line's client side: `job`, `exec`, `workflow`, `calendar` and `backfill` over
//! the HTTP API ([`remote`] is its HTTP client and its error handling, [`output`] its tables),
//! `cron` (evaluated locally, no server needed), and `history prune` (run against the store
//! itself). docs/configuration.md, "Client commands", is the contract of every flag.
//!
//! Invariants: a file given to `apply` is checked whole before anything is sent, and a refused
//! file or flag is an [`remote::InputError`] (exit code 2), never a partial write; standard
//! output closed early (`| head`) is not an error.

#[macro_use]
extern crate sundial_server;

pub mod audit_cmd;
pub mod backfill_cmd;
pub mod calendar_cmd;
pub mod client;
pub mod cron_cmd;
pub mod history;
pub mod output;
pub mod remote;
pub mod workflow_cmd;
