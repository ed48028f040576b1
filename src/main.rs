//! The `subtask` command line.
//!
//! Today it reports what the crate is; `subtask serve` and the client
//! commands arrive with the server and client layers.

use clap::{Parser, Subcommand};

/// subtask: hierarchical, long-running MCP tasks with subtasks, steering and pause/resume.
#[derive(Debug, Parser)]
#[command(name = "subtask", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the protocol surface this build implements.
    Info,
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Info) | None => {
            println!("subtask {}", env!("CARGO_PKG_VERSION"));
            println!("extension: {}", subtask::model::TASKS_EXTENSION);
            println!("layers: model, core (sans-IO lifecycle)");
        }
    }
}
