//! Command line of the storage agent.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use greenreplica_storage::layout::LayoutKind;
use greenreplica_storage::policy::{PolicySpec, DEFAULT_START_STOP_BUDGET};
use greenreplica_storage::replay::{replay, ReplayOptions};

#[derive(Parser)]
#[command(
    name = "greenreplica-storage",
    version,
    about = "Storage agent for greenreplica: a userspace disk array with power management"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a block trace (MSR Cambridge CSV) under a virtual clock; prints one JSON object.
    Replay {
        #[arg(long)]
        trace: PathBuf,
        /// Built-in profile name or path to a profile .toml.
        #[arg(long)]
        profile: String,
        /// always-on | idle-timeout[:SECONDS] | cooperative[:FALLBACK_SECONDS]
        #[arg(long, default_value = "idle-timeout:600")]
        policy: PolicySpec,
        #[arg(long, default_value = "single")]
        layout: LayoutKind,
        /// Number of members (default: 1 for single, 2 for raid10).
        #[arg(long)]
        members: Option<usize>,
        #[arg(long, default_value_t = 65536)]
        stripe_unit: u64,
        /// Only replay requests of this DiskNumber (0 = volume rows of an agent recording).
        #[arg(long)]
        disk: Option<u32>,
        /// Start/stop budget per day for the cooperative policy.
        #[arg(long, default_value_t = DEFAULT_START_STOP_BUDGET)]
        start_stop_budget: u32,
    },
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Replay {
            trace,
            profile,
            policy,
            layout,
            members,
            stripe_unit,
            disk,
            start_stop_budget,
        } => {
            let members = members.unwrap_or(match layout {
                LayoutKind::Single => 1,
                LayoutKind::Raid10 => 2,
            });
            let report = replay(&ReplayOptions {
                trace,
                profile,
                policy,
                layout,
                members,
                stripe_unit,
                disk,
                start_stop_budget_per_day: start_stop_budget,
            })?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("greenreplica-storage: {e:#}");
            ExitCode::FAILURE
        }
    }
}
