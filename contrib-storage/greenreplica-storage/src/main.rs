//! Command line of the storage agent.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use serde_json::{json, Value};

use greenreplica_storage::control::client;
use greenreplica_storage::layout::LayoutKind;
use greenreplica_storage::policy::{PolicySpec, DEFAULT_START_STOP_BUDGET};
use greenreplica_storage::profile::DriveProfile;
use greenreplica_storage::replay::{replay, FailureOptions, ReplayOptions};
use greenreplica_storage::synth::{self, SynthOptions};
use std::io::Write;

const DEFAULT_SOCKET: &str = "/run/greenreplica-storage/control.sock";

#[derive(Parser)]
#[command(
    name = "greenreplica-storage",
    version,
    about = "Storage agent for greenreplica: a userspace disk array with power management"
)]
struct Cli {
    /// Control socket of the running agent (client commands).
    #[arg(long, global = true, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the agent (as root): assemble, export and mount the configured volumes.
    Serve {
        #[arg(long)]
        config: PathBuf,
    },
    /// Show every volume with its power state, ledger and members.
    Status,
    /// List volume names.
    Volumes,
    /// Spin a volume's members up ahead of use.
    Wake { volume: String },
    /// Ask for a volume's members to spin down (cooperative policy).
    Sleep {
        volume: String,
        /// How long the caller expects the volume to stay idle.
        #[arg(long)]
        expected_idle_s: Option<f64>,
    },
    /// Mark a member failed (the volume continues degraded if it has a copy).
    FailMember { volume: String, member: usize },
    /// Put a fresh member in place of a failed one and rebuild it.
    ReplaceMember {
        volume: String,
        member: usize,
        /// New backing file or device (default: the configured path, recreated).
        #[arg(long)]
        path: Option<String>,
    },
    /// Compare every copy of a volume and rewrite the ones that differ (MD's repair);
    /// prints what it found.
    Scrub {
        volume: String,
        /// Only compare and report (MD's check).
        #[arg(long)]
        check_only: bool,
    },
    /// Print the Prometheus metrics text.
    Metrics,
    /// Send one JSON request and print the reply (or one field of it).
    Request {
        json: String,
        /// Print only this field of the reply, as a JSON pointer (e.g. /volume/state).
        #[arg(long)]
        pointer: Option<String>,
    },
    /// Send standard input to the socket line by line, verbatim, and print each reply line
    /// (for testing how the agent treats bad input).
    Pipe,
    /// List the built-in drive profiles (or one, by name or path) with their derived
    /// break-even time per standby mode.
    Profiles { name: Option<String> },
    /// Benchmark one drive profile's model in virtual time (random reads by queue depth and
    /// scheduler, bandwidth per zone, scattered writes); prints one JSON object.
    DriveBench {
        profile: String,
        #[arg(long, default_value_t = 4000)]
        requests: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Extract a member's track boundaries by timing and print them (JSON) with the time
    /// it took: MEMBER is PROFILE[@SEED] (an emulated drive, virtual time) or a device path
    /// (opened read-only, real time).
    Tracks {
        member: String,
        /// The emulated drive's unit (same as @SEED).
        #[arg(long)]
        seed: Option<u64>,
        /// Search only the first this many sectors.
        #[arg(long)]
        sectors: Option<u64>,
        /// Extra probe time that marks a boundary crossing (default 0.1 ms).
        #[arg(long)]
        margin_ms: Option<f64>,
        /// Time each probe this many times and keep the fastest (noisy real devices).
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        /// Print only the summary, not the boundary list.
        #[arg(long)]
        summary: bool,
    },
    /// Track-alignment benchmark of one drive model in virtual time (bench/tracks);
    /// prints one JSON object.
    TracksBench {
        #[arg(default_value = "maxtor-atlas-10k-v")]
        profile: String,
        /// The unit measured.
        #[arg(long, default_value_t = 1)]
        unit: u64,
        /// Units whose whole-drive extraction is timed.
        #[arg(long, default_value_t = 4)]
        units: u64,
        /// 64-sector accesses of each kind (crossing, within a track).
        #[arg(long, default_value_t = 2000)]
        samples: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Write a synthetic block trace (MSR Cambridge CSV) to standard output.
    SynthTrace {
        /// One of the RoLo paper's seven traces (src2_2, proj_0, mds_0, wdev_0, web_1,
        /// rsrch_2, hm_1): sets the shape; --requests, --volume-bytes and --seed still apply.
        #[arg(long, conflicts_with_all = ["iops", "write_ratio", "request_bytes", "sequential",
            "diurnal", "busy_share", "idle_gap_s", "variable_size"])]
        preset: Option<String>,
        /// Multiply the preset's (or --iops') mean rate: a trace for fewer disks at the same
        /// per-disk load (QMD's benchmark replays one pair of the paper's 14).
        #[arg(long, default_value_t = 1.0)]
        rate_scale: f64,
        #[arg(long, default_value_t = 1_000_000)]
        requests: u64,
        /// Mean requests per second.
        #[arg(long, default_value_t = 20.0)]
        iops: f64,
        #[arg(long, default_value_t = 0.7)]
        write_ratio: f64,
        #[arg(long, default_value_t = 8192)]
        request_bytes: u64,
        #[arg(long, default_value_t = 16_000_000_000)]
        volume_bytes: u64,
        /// Share of requests that continue where the previous one ended.
        #[arg(long, default_value_t = 0.3)]
        sequential: f64,
        /// Daily swing of the arrival rate (0 = flat).
        #[arg(long, default_value_t = 0.5)]
        diurnal: f64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Share of time in busy periods; below 1, requests come in bursts between idle gaps.
        #[arg(long, default_value_t = 1.0)]
        busy_share: f64,
        /// Mean idle gap between bursts, seconds.
        #[arg(long, default_value_t = 60.0)]
        idle_gap_s: f64,
        /// Vary request sizes around --request-bytes (4 KiB plus whole sectors).
        #[arg(long)]
        variable_size: bool,
    },
    /// Reliability of a mirrored layout by sequential Monte Carlo (the RoLo paper's Table 3
    /// model): disk failures and data-loss events per 1,000 arrays; prints one JSON object.
    Reliability {
        /// raid0 | raid10 | graid | rolo-p | rolo-r | rolo-e
        #[arg(long)]
        layout: greenreplica_storage::reliability::Layout,
        #[arg(long, default_value_t = 100_000)]
        arrays: u64,
        #[arg(long, default_value_t = 10.0)]
        years: f64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Mirrored pairs per array (Table 5: 5, i.e. 10 disks).
        #[arg(long, default_value_t = 5)]
        pairs: usize,
        /// Share of each primary's data whose newest copy is in the log.
        #[arg(long, default_value_t = 0.05)]
        dirty_fraction: f64,
        /// Share of each disk holding home data (the rest is free, the RoLo log pool).
        #[arg(long, default_value_t = 0.8)]
        home_fraction: f64,
        /// A latent error anywhere on a disk a restore reads is fatal (Elerath & Pecht).
        #[arg(long)]
        whole_disk_reads: bool,
        /// Ageing rate of a spun-down disk relative to a spinning one.
        #[arg(long, default_value_t = 1.0)]
        standby_failure_factor: f64,
        /// Characteristic life of latent sector errors per disk, hours (inf disables them).
        #[arg(long, default_value_t = 1_776.0)]
        latent_error_eta_hours: f64,
        /// Worker threads (default: the available cores); the result does not depend on it.
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Replay a block trace (MSR Cambridge CSV) under a virtual clock; prints one JSON object.
    Replay {
        #[arg(long)]
        trace: PathBuf,
        /// Built-in profile name or path to a profile .toml.
        #[arg(long)]
        profile: String,
        /// always-on | idle-timeout[:SECONDS] | cooperative[:FALLBACK_SECONDS] | mirrors[:SECONDS]
        #[arg(long, default_value = "idle-timeout:600")]
        policy: PolicySpec,
        #[arg(long, default_value = "single")]
        layout: LayoutKind,
        /// Number of members (default: the layout's smallest, e.g. 1 for single, 2 for raid10).
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
        /// Commands each drive queues at once (default: the profile's queue.depth).
        #[arg(long)]
        queue_depth: Option<usize>,
        /// fcfs | sstf | c-look | sptf (default: the profile's queue.scheduler).
        #[arg(long)]
        scheduler: Option<greenreplica_storage::profile::SchedulerKind>,
        /// Profile of the layout's flash member (QMD's write buffer; default: --profile).
        #[arg(long)]
        flash_profile: Option<String>,
        /// Members of this many bytes instead of the profile's capacity (scaled replays).
        #[arg(long)]
        member_bytes: Option<u64>,
        /// Fail this member inside the trace (at --fail-at); a spare takes over and is rebuilt.
        #[arg(long, requires = "fail_at")]
        fail_member: Option<usize>,
        /// Seconds into the trace at which --fail-member fails.
        #[arg(long, requires = "fail_member")]
        fail_at: Option<f64>,
        /// Rebuild rate while user I/O moves (MD's speed_limit_min), MB/s.
        #[arg(long, default_value_t = 1.0)]
        rebuild_min_mb_s: f64,
        /// Rebuild rate when the drives are idle (MD's speed_limit_max), MB/s.
        #[arg(long, default_value_t = 100.0)]
        rebuild_max_mb_s: f64,
        /// Bytes a rebuild step copies.
        #[arg(long, default_value_t = 65536)]
        rebuild_chunk: u64,
        /// A layout option KEY=VALUE, as in `[volume.layout_options]` (RoLo: log_share,
        /// rotate_at, prewake_at, zebra_mb; QMD: k, fill_threshold, buffer_bytes,
        /// extent_bytes, mirror_bytes, staging_bytes, compact_live; IDO: rebuild, zone_size,
        /// epoch_s, track; raid5-tracks: stripe, fill_parity_read); repeatable.
        #[arg(long = "layout-option")]
        layout_options: Vec<String>,
    },
}

/// Send a request; print the reply; a reply with ok=false is an error exit.
fn client_call(socket: &std::path::Path, request: Value, text_field: Option<&str>) -> Result<()> {
    let reply = client::call(socket, &request)?;
    match text_field
        .and_then(|f| reply.get(f))
        .and_then(Value::as_str)
    {
        Some(text) => print!("{text}"),
        None => println!("{}", serde_json::to_string_pretty(&reply)?),
    }
    if reply.get("ok") != Some(&Value::Bool(true)) {
        bail!(
            "the agent refused: {}",
            reply
                .get("reason")
                .or_else(|| reply.get("error"))
                .and_then(Value::as_str)
                .unwrap_or("no reason given")
        );
    }
    Ok(())
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn run(cli: Cli) -> Result<()> {
    let socket = cli.socket.as_path();
    match cli.command {
        Command::Serve { config } => {
            init_logging();
            greenreplica_storage::daemon::serve(&config)
        }
        Command::Status => client_call(socket, json!({"op": "status"}), None),
        Command::Volumes => client_call(socket, json!({"op": "volumes"}), None),
        Command::Wake { volume } => {
            client_call(socket, json!({"op": "wake", "volume": volume}), None)
        }
        Command::Sleep {
            volume,
            expected_idle_s,
        } => client_call(
            socket,
            json!({"op": "sleep", "volume": volume, "expected_idle_s": expected_idle_s}),
            None,
        ),
        Command::FailMember { volume, member } => client_call(
            socket,
            json!({"op": "fail_member", "volume": volume, "member": member}),
            None,
        ),
        Command::ReplaceMember {
            volume,
            member,
            path,
        } => client_call(
            socket,
            json!({"op": "replace_member", "volume": volume, "member": member, "path": path}),
            None,
        ),
        Command::Scrub { volume, check_only } => client_call(
            socket,
            json!({"op": "scrub", "volume": volume, "repair": !check_only}),
            None,
        ),
        Command::Metrics => client_call(socket, json!({"op": "metrics"}), Some("text")),
        Command::Request { json, pointer } => {
            let request: Value =
                serde_json::from_str(&json).context("the request is not valid JSON")?;
            match pointer {
                None => client_call(socket, request, None),
                Some(pointer) => {
                    let reply = client::call(socket, &request)?;
                    match reply.pointer(&pointer) {
                        Some(Value::String(s)) => println!("{s}"),
                        Some(v) => println!("{v}"),
                        None => bail!("the reply has no {pointer}: {reply}"),
                    }
                    Ok(())
                }
            }
        }
        Command::Pipe => client::pipe(socket, std::io::stdin().lock(), std::io::stdout().lock()),
        Command::Profiles { name } => {
            let names = match name {
                Some(n) => vec![n],
                None => DriveProfile::builtin_names()
                    .into_iter()
                    .map(String::from)
                    .collect(),
            };
            let mut out = Vec::new();
            for n in names {
                let p = DriveProfile::load(&n)?;
                let modes: Vec<Value> = (0..p.standby_modes.len()).map(|i| p.summary(i)).collect();
                out.push(json!({"name": p.name, "default_standby_mode": p.default_standby_mode, "modes": modes}));
            }
            println!("{}", serde_json::to_string_pretty(&out)?);
            Ok(())
        }
        Command::Tracks {
            member,
            seed,
            sectors,
            margin_ms,
            repeat,
            summary,
        } => {
            use greenreplica_storage::tracks::report;
            let target = report::Target::parse(&member, seed)?;
            let out = report::run(&target, sectors, margin_ms, repeat, !summary)?;
            println!("{}", serde_json::to_string_pretty(&out)?);
            Ok(())
        }
        Command::TracksBench {
            profile,
            unit,
            units,
            samples,
            seed,
        } => {
            let out =
                greenreplica_storage::tracks::bench::run(&profile, unit, units, samples, seed)?;
            println!("{}", serde_json::to_string_pretty(&out)?);
            Ok(())
        }
        Command::DriveBench {
            profile,
            requests,
            seed,
        } => {
            let report = greenreplica_storage::drive::bench::run(&profile, requests, seed)?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(())
        }
        Command::SynthTrace {
            preset,
            rate_scale,
            requests,
            iops,
            write_ratio,
            request_bytes,
            volume_bytes,
            sequential,
            diurnal,
            seed,
            busy_share,
            idle_gap_s,
            variable_size,
        } => {
            let options = match preset {
                Some(name) => synth::Preset::find(&name)
                    .map_err(anyhow::Error::msg)?
                    .options(requests, volume_bytes, seed),
                None => SynthOptions {
                    requests,
                    iops,
                    write_ratio,
                    request_bytes,
                    volume_bytes,
                    sequential,
                    diurnal,
                    seed,
                    busy_share,
                    idle_gap_s,
                    variable_size,
                    hot: (0.0, 0.0),
                },
            };
            let options = SynthOptions {
                iops: options.iops * rate_scale,
                ..options
            };
            synth::validate(&options).map_err(anyhow::Error::msg)?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            synth::generate(&options, &mut out).context("cannot write the trace")?;
            out.flush().context("cannot write the trace")
        }
        Command::Reliability {
            layout,
            arrays,
            years,
            seed,
            pairs,
            dirty_fraction,
            home_fraction,
            whole_disk_reads,
            standby_failure_factor,
            latent_error_eta_hours,
            threads,
        } => {
            use greenreplica_storage::reliability;
            let params = reliability::Params {
                pairs,
                years,
                dirty_fraction,
                home_fraction,
                whole_disk_reads,
                standby_failure_factor,
                latent_error_eta_hours,
                ..reliability::Params::default()
            };
            params.validate().map_err(anyhow::Error::msg)?;
            if arrays == 0 {
                bail!("--arrays must be at least 1");
            }
            let threads = threads.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
            });
            let report = reliability::run(layout, &params, arrays, seed, threads);
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(())
        }
        Command::Replay {
            trace,
            profile,
            policy,
            layout,
            members,
            stripe_unit,
            disk,
            start_stop_budget,
            queue_depth,
            scheduler,
            flash_profile,
            member_bytes,
            fail_member,
            fail_at,
            rebuild_min_mb_s,
            rebuild_max_mb_s,
            rebuild_chunk,
            layout_options,
        } => {
            let members = members.unwrap_or(layout.default_members());
            let failure = fail_member
                .zip(fail_at)
                .map(|(member, at_s)| FailureOptions {
                    member,
                    at_s,
                    min_mb_s: rebuild_min_mb_s,
                    max_mb_s: rebuild_max_mb_s,
                    chunk: rebuild_chunk,
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
                queue_depth,
                scheduler,
                flash_profile,
                member_bytes,
                failure,
                layout_options: greenreplica_storage::layout::LayoutOptions::parse_args(
                    &layout_options,
                )
                .map_err(anyhow::Error::msg)?,
            })?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A client piped into `head` should end quietly, as Unix tools do; the daemon keeps
    // Rust's ignored SIGPIPE and handles EPIPE on its sockets.
    if !matches!(cli.command, Command::Serve { .. }) {
        // SAFETY: no thread has been started yet; this restores the default action.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("greenreplica-storage: {e:#}");
            ExitCode::FAILURE
        }
    }
}
