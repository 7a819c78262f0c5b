//! The harnesses, one module each; `main` runs one with its flags read from the command line.

pub mod a2a;
pub mod capabilities;
pub mod churn;
pub mod claims;
pub mod cluster;
pub mod code_exec;
pub mod file_watch;
pub mod first_view;
pub mod hibernate;
pub mod memory;
pub mod orchestrator;
pub mod pause;
pub mod replicas;
pub mod run_steps;
pub mod shell_exec;
pub mod startup;
