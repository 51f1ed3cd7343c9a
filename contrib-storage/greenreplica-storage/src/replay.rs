//! Replay a block trace through the engine's event core under the virtual clock: records
//! arrive as events, member commands queue on the drive models (several at once per drive)
//! and complete as events.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use serde::Serialize;

use crate::clock::{Seconds, VirtualClock};
use crate::drive::Drive;
use crate::latency::{ResponseSummary, Samples};
use crate::layout::{self, LayoutKind, LayoutOptions, Role};
use crate::ledger::{Ledger, PerState};
use crate::policy::PolicySpec;
use crate::profile::{DriveProfile, SchedulerKind};
use crate::service_model::IoKind;
use crate::superblock::DATA_OFFSET;
use crate::trace::{ticks_to_seconds, TraceReader, TraceRecord};
use crate::volume::{Health, IntegritySettings, MemberSlot, Request, Runner, Volume};

#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub trace: PathBuf,
    pub profile: String,
    pub policy: PolicySpec,
    pub layout: LayoutKind,
    pub members: usize,
    pub stripe_unit: u64,
    /// Only replay this DiskNumber (recorded agent traces: 0 is the volume).
    pub disk: Option<u32>,
    pub start_stop_budget_per_day: u32,
    /// Override the profile's queue depth and scheduler on every drive.
    pub queue_depth: Option<usize>,
    pub scheduler: Option<SchedulerKind>,
    /// Profile of members whose role is Flash (QMD's buffer); None: `profile`.
    pub flash_profile: Option<String>,
    /// `[volume.layout_options]` of the replayed volume (`--layout-option KEY=VALUE`).
    pub layout_options: LayoutOptions,
    /// Members of this many bytes instead of the profile's capacity (a scaled-down replay).
    pub member_bytes: Option<u64>,
    /// A member failing inside the trace (issue 17).
    pub failure: Option<FailureOptions>,
}

/// Member `member` fails at `at_s` seconds into the trace; a blank spare takes its slot at
/// once and is rebuilt on the event core, `chunk` bytes a step, at `max_mb_s` when the
/// drives are idle and `min_mb_s` while user I/O moves (MD's speed limits). The members
/// then store bytes (a spare is written), so the replay moves zeros through every plan.
#[derive(Debug, Clone)]
pub struct FailureOptions {
    pub member: usize,
    pub at_s: f64,
    pub min_mb_s: f64,
    pub max_mb_s: f64,
    pub chunk: u64,
}

/// What a failure inside the trace did.
#[derive(Debug, Serialize)]
pub struct ReconstructionReport {
    pub member: usize,
    pub failed_at_s: f64,
    /// When the spare was first seen in sync (at a request's completion); None: not
    /// within the trace.
    pub rebuilt_at_s: Option<f64>,
    pub reconstruction_s: Option<f64>,
    /// User requests that arrived during the reconstruction, their response times.
    pub response_ms: ResponseSummary,
    /// Share of those requests served (at least partly) by a surrogate member.
    pub surrogate_share: f64,
}

/// A member that stores nothing: reads return zeros, writes are dropped (a replay with a
/// rebuild needs stores for the spare to be written; the bytes themselves do not matter).
#[derive(Debug)]
struct NullMember(u64);

impl crate::member::Member for NullMember {
    fn kind(&self) -> crate::member::MemberKind {
        crate::member::MemberKind::File
    }
    fn describe(&self) -> String {
        "replay null member".into()
    }
    fn size(&self) -> u64 {
        self.0
    }
    fn read_at(&self, buf: &mut [u8], _offset: u64) -> std::io::Result<()> {
        buf.fill(0);
        Ok(())
    }
    fn write_at(&self, _data: &[u8], _offset: u64) -> std::io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(Debug, Serialize)]
pub struct Figures {
    pub energy_joules: f64,
    pub spin_ups: u64,
    pub spin_downs: u64,
    pub state_seconds: PerState,
    pub state_joules: PerState,
    pub reads: u64,
    pub writes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub standby_seconds_by_mode: std::collections::BTreeMap<String, f64>,
    pub response_ms: ResponseSummary,
}

impl Figures {
    fn new(ledger: &Ledger, response_ms: ResponseSummary) -> Self {
        Self {
            energy_joules: ledger.energy_joules,
            spin_ups: ledger.spin_ups,
            spin_downs: ledger.spin_downs,
            state_seconds: ledger.state_seconds,
            state_joules: ledger.state_joules,
            reads: ledger.reads,
            writes: ledger.writes,
            bytes_read: ledger.bytes_read,
            bytes_written: ledger.bytes_written,
            standby_seconds_by_mode: ledger.standby_seconds_by_mode.clone(),
            response_ms,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct MemberReport {
    pub index: usize,
    /// The most commands its drive had waiting when one was queued.
    pub max_queue_depth: usize,
    #[serde(flatten)]
    pub figures: Figures,
}

#[derive(Debug, Serialize)]
pub struct ReplayReport {
    pub trace: String,
    pub profile: String,
    pub policy: String,
    pub layout: LayoutKind,
    pub stripe_unit: u64,
    pub requests: u64,
    /// Requests whose offset lay beyond the volume and were wrapped around its size.
    pub requests_wrapped: u64,
    /// Until the last request completed and every drive had written its cache back.
    pub duration_s: f64,
    pub break_even_s: f64,
    #[serde(flatten)]
    pub figures: Figures,
    pub members: Vec<MemberReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconstruction: Option<ReconstructionReport>,
    /// Bytes of memory the layout's own metadata took at the end (IDO's zone table).
    pub layout_metadata_bytes: u64,
    /// The layout's state (`layout_state`) every `LAYOUT_SAMPLE_S` of trace time, for a
    /// layout that reports one (QMD: extents held, fill, compaction counters).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layout_samples: Vec<(f64, serde_json::Value)>,
    /// How fast a layout that buffers writes (QMD) wrote them back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_back: Option<WriteBackReport>,
}

/// The buffered bytes of a layout that buffers writes (its `layout_state` reports
/// `buffered_bytes`), sampled at request completions at most every `SAMPLE_S`: what the
/// write-back drained and how fast. Net figures: writes buffered during a drain offset it.
#[derive(Debug, Default, Serialize)]
pub struct WriteBackReport {
    pub samples: u64,
    pub peak_buffered_bytes: u64,
    /// Time-weighted mean over the samples.
    pub mean_buffered_bytes: f64,
    /// Sum of the decreases between samples.
    pub drained_bytes: u64,
    /// Time of the sample intervals (at most `MAX_GAP_S` long) in which the buffer shrank,
    /// and the bytes it shrank by in them per second: the write-back rate while draining.
    pub draining_s: f64,
    pub drain_bytes_per_s: f64,
    /// Decreases across longer intervals (no completions between): in `drained_bytes` only.
    pub unresolved_drained_bytes: u64,
    /// Times the buffer was seen empty after holding bytes.
    pub emptied: u64,
    #[serde(skip)]
    first_at: Option<Seconds>,
}

/// Sampling period and the longest interval whose decrease counts as a rate.
const SAMPLE_S: f64 = 0.25;
const MAX_GAP_S: f64 = 2.0;

impl WriteBackReport {
    fn sample(&mut self, last: &mut Option<(Seconds, u64)>, now: Seconds, buffered: u64) {
        if let Some((t, b)) = *last {
            let dt = now - t;
            self.mean_buffered_bytes += b as f64 * dt;
            if buffered < b {
                let drop = b - buffered;
                self.drained_bytes += drop;
                if dt <= MAX_GAP_S {
                    self.draining_s += dt;
                } else {
                    self.unresolved_drained_bytes += drop;
                }
                if buffered == 0 {
                    self.emptied += 1;
                }
            }
        }
        self.samples += 1;
        self.first_at.get_or_insert(now);
        self.peak_buffered_bytes = self.peak_buffered_bytes.max(buffered);
        *last = Some((now, buffered));
    }

    /// Done; the last sample was at `last_at`.
    fn finish(mut self, last_at: Seconds) -> Self {
        let span_s = last_at - self.first_at.unwrap_or(last_at);
        if span_s > 0.0 {
            self.mean_buffered_bytes /= span_s;
        }
        if self.draining_s > 0.0 {
            self.drain_bytes_per_s =
                (self.drained_bytes - self.unresolved_drained_bytes) as f64 / self.draining_s;
        }
        self
    }
}

fn buffered_bytes(layout: &dyn layout::Personality) -> Option<u64> {
    layout
        .layout_state()
        .and_then(|s| s.get("buffered_bytes").and_then(|b| b.as_u64()))
}

/// Tick interval of a replay whose layout does background work of its own.
const LAYOUT_TICK_S: f64 = 1.0;
/// Trace seconds between two samples of the layout's state.
const LAYOUT_SAMPLE_S: f64 = 600.0;

pub fn replay(opts: &ReplayOptions) -> Result<ReplayReport> {
    let profile = Arc::new(DriveProfile::load(&opts.profile)?);
    let mode = profile.default_mode_index();
    let clock = Arc::new(VirtualClock::new());
    let member_bytes = opts.member_bytes.unwrap_or(profile.capacity_bytes);
    // Track-aligned layouts: member i is unit i of the model, and its chunks are that
    // unit's tracks.
    let tracks = [
        layout::raid0_tracks::NAME,
        layout::raid5_tracks::NAME,
        layout::raid10_tracks::NAME,
    ]
    .contains(&opts.layout.name());
    let layout: Box<dyn layout::Personality> = if tracks {
        let maps = (0..opts.members)
            .map(|i| {
                layout::raid0_tracks::model_tracks(&opts.profile, Some(i as u64), member_bytes)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let l: Box<dyn layout::Personality> = if opts.layout.name() == layout::raid5_tracks::NAME {
            Box::new(layout::Raid5Tracks::with_options(
                maps,
                member_bytes,
                &opts.layout_options,
            )?)
        } else if opts.layout.name() == layout::raid10_tracks::NAME {
            Box::new(layout::Raid10Tracks::with_tracks(maps, member_bytes)?)
        } else {
            Box::new(layout::Raid0Tracks::with_tracks(maps, member_bytes)?)
        };
        for (key, value) in opts.layout_options.iter() {
            l.set_option(key, value)
                .map_err(|problem| anyhow::anyhow!("layout_options.{key}: {problem}"))?;
        }
        l
    } else {
        layout::build_with(
            opts.layout,
            opts.members,
            member_bytes,
            opts.stripe_unit,
            &opts.layout_options,
        )?
    };
    if let Some(f) = &opts.failure {
        if f.member >= opts.members {
            anyhow::bail!(
                "--fail-member {} is not a member (0..{})",
                f.member,
                opts.members
            );
        }
    }
    let null = || -> Option<Arc<dyn crate::member::Member>> {
        opts.failure.as_ref().map(|_| {
            Arc::new(NullMember(member_bytes + DATA_OFFSET)) as Arc<dyn crate::member::Member>
        })
    };
    let flash = match &opts.flash_profile {
        Some(name) => Arc::new(DriveProfile::load(name)?),
        None => profile.clone(),
    };
    let slots = (0..opts.members)
        .map(|i| {
            let member_profile = if tracks {
                let mut p = (*profile).clone();
                p.unit = Some(i as u64);
                Arc::new(p)
            } else if layout.role(i) == layout::Role::Flash {
                flash.clone()
            } else {
                profile.clone()
            };
            let mode = member_profile.default_mode_index();
            let queue = member_profile.queue.clone();
            let mut drive = Drive::new(
                member_profile,
                mode,
                opts.policy.build(opts.start_stop_budget_per_day),
                0.0,
                Ledger::default(),
            );
            drive.set_queueing(
                opts.queue_depth.unwrap_or(queue.depth).clamp(1, 1024),
                opts.scheduler.unwrap_or(queue.scheduler),
            );
            MemberSlot::new(null(), drive, Health::InSync)
        })
        .collect();
    let mut volume = Volume::new("replay", layout, slots, clock.clone(), None, None);
    if let Some(f) = &opts.failure {
        volume = volume.with_integrity(IntegritySettings {
            rebuild_min_mb_s: f.min_mb_s,
            ..IntegritySettings::default()
        });
    }
    let capacity = volume.capacity();

    let failed = std::cell::Cell::new(false);
    let mut origin = None;
    let mut wrapped = 0u64;
    let mut responses = Samples::default();
    let mut member_responses: Vec<Samples> =
        (0..opts.members).map(|_| Samples::default()).collect();
    let reader = TraceReader::open(&opts.trace)?;
    // Trace records become arrivals on the event core, read as the replay goes.
    let arrivals = reader.filter_map(|record| {
        let TraceRecord {
            timestamp,
            disk,
            kind,
            offset,
            size,
            ..
        } = match record {
            Ok(r) => r,
            Err(e) => return Some(Err(anyhow::Error::from(e))),
        };
        if opts.disk.is_some_and(|d| d != disk) || size == 0 {
            return None;
        }
        let t0 = *origin.get_or_insert(timestamp);
        let size = size.min(capacity);
        let mut offset = offset;
        if offset + size > capacity {
            offset %= capacity - size + 1;
            wrapped += 1;
        }
        let at = ticks_to_seconds(timestamp.saturating_sub(t0));
        let mut data = None;
        if let Some(f) = &opts.failure {
            if at >= f.at_s && !failed.get() {
                failed.set(true);
                volume.fail_member(f.member, "replay: --fail-at");
                let spare = Arc::new(NullMember(member_bytes + DATA_OFFSET));
                if let Err(e) = volume.replace_member(f.member, spare) {
                    return Some(Err(anyhow::Error::from(e)));
                }
            }
            // The members store (null) bytes: a write carries some.
            data = (kind == IoKind::Write).then(|| vec![0u8; size as usize]);
        }
        Some(Ok((
            at,
            Request {
                kind,
                offset,
                len: size,
                data,
            },
        )))
    });
    let mut requests = 0u64;
    let mut runner = Runner::new(&volume);
    if !volume.layout().reserved().is_empty() || opts.failure.is_some() {
        // A layout with regions of its own (a log) has background work: destage on ticks;
        // so does one that migrates and reclaims around a rebuild (IDO).
        runner = runner.with_ticks(LAYOUT_TICK_S);
    }
    if let Some(f) = &opts.failure {
        runner = runner.with_background(f.max_mb_s, f.chunk, f.at_s);
    }
    let surrogates: Vec<bool> = (0..opts.members)
        .map(|m| volume.layout().role(m) == Role::Surrogate)
        .collect();
    let mut rebuilt_at = None;
    let mut during = Samples::default();
    let mut during_surrogate = 0u64;
    let mut during_count = 0u64;
    let mut layout_samples = Vec::new();
    let mut next_sample = 0.0;
    let mut write_back = buffered_bytes(volume.layout()).map(|_| WriteBackReport::default());
    let mut last_sample: Option<(Seconds, u64)> = None;
    let depths = runner.queue_depths();
    let end = runner.run(arrivals, |done| {
        requests += 1;
        if done.done >= next_sample {
            if let Some(state) = volume.layout().layout_state() {
                layout_samples.push((done.done, state));
            }
            next_sample = done.done + LAYOUT_SAMPLE_S;
        }
        if let Some(w) = write_back.as_mut() {
            if last_sample.is_none_or(|(t, _)| done.done - t >= SAMPLE_S) {
                if let Some(b) = buffered_bytes(volume.layout()) {
                    w.sample(&mut last_sample, done.done, b);
                }
            }
        }
        responses.push(done.done - done.arrival);
        if let (Some(f), None) = (&opts.failure, rebuilt_at) {
            if failed.get() && done.arrival >= f.at_s {
                during.push(done.done - done.arrival);
                during_count += 1;
                if done.member_done.iter().any(|&(m, _)| surrogates[m]) {
                    during_surrogate += 1;
                }
            }
            if failed.get()
                && matches!(
                    volume.slot(f.member).map(|s| s.health()),
                    Some(Health::InSync)
                )
            {
                rebuilt_at = Some(done.done);
            }
        }
        for (member, at) in done.member_done {
            member_responses[member].push(at - done.arrival);
        }
    })?;
    let reconstruction = opts.failure.as_ref().map(|f| {
        let n = during_count.max(1) as f64;
        ReconstructionReport {
            member: f.member,
            failed_at_s: f.at_s,
            rebuilt_at_s: rebuilt_at,
            reconstruction_s: rebuilt_at.map(|t| t - f.at_s),
            surrogate_share: during_surrogate as f64 / n,
            response_ms: during.summary(1e3),
        }
    });

    let ledgers = volume.member_ledgers(end);
    let total = Ledger::sum(&ledgers);
    Ok(ReplayReport {
        trace: opts.trace.display().to_string(),
        profile: profile.name.clone(),
        policy: opts.policy.to_string(),
        layout: opts.layout,
        stripe_unit: volume.layout().stripe_unit(),
        requests,
        requests_wrapped: wrapped,
        duration_s: end,
        break_even_s: profile.break_even_s(mode),
        figures: Figures::new(&total, responses.summary(1e3)),
        members: ledgers
            .iter()
            .zip(member_responses.iter_mut())
            .enumerate()
            .map(|(index, (ledger, samples))| MemberReport {
                index,
                max_queue_depth: depths.max(index),
                figures: Figures::new(ledger, samples.summary(1e3)),
            })
            .collect(),
        reconstruction,
        layout_metadata_bytes: volume.layout().metadata_bytes(),
        layout_samples,
        write_back: write_back.map(|w| w.finish(last_sample.map_or(0.0, |(t, _)| t))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(name: &str, lines: &[&str]) -> PathBuf {
        let path =
            std::env::temp_dir().join(format!("grs-replay-{}-{name}.csv", std::process::id()));
        std::fs::write(&path, lines.join("\n")).unwrap();
        path
    }

    fn options(path: PathBuf, policy: &str) -> ReplayOptions {
        ReplayOptions {
            trace: path,
            profile: "ultrastar-36z15".into(),
            policy: policy.parse().unwrap(),
            layout: LayoutKind::SINGLE,
            members: 1,
            stripe_unit: 65536,
            layout_options: Default::default(),
            disk: None,
            start_stop_budget_per_day: 48,
            queue_depth: None,
            scheduler: None,
            flash_profile: None,
            member_bytes: None,
            failure: None,
        }
    }

    const TWO_READS: [&str; 2] = [
        "128166372000000000,h,0,Read,0,4096,0",
        // 1000 s later (10^10 ticks of 100 ns).
        "128166382000000000,h,0,Read,0,4096,0",
    ];

    /// Writes while QMD's second disk sleeps are buffered in flash; a read burst wakes it
    /// and the write-back drains them: the report sees the buffer fill and empty.
    #[test]
    fn a_qmd_replay_reports_its_write_back() {
        let tick = |s: f64| (s * 1e7) as u64;
        let mut lines = vec!["0,h,0,Read,0,4096,0".to_string()];
        for i in 0..20u64 {
            lines.push(format!(
                "{},h,0,Write,{},65536,0",
                tick(10.0 + i as f64 * 0.01),
                i * (7 << 20)
            ));
        }
        for i in 0..10_000u64 {
            let offset = (i * 7919 % 15_000) << 16;
            lines.push(format!(
                "{},h,0,Read,{offset},65536,0",
                tick(20.0 + i as f64 * 0.003)
            ));
        }
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let path = trace("qmd-write-back", &refs);
        let mut opts = options(path.clone(), "utilization:sleep_epochs=1");
        opts.profile = "ultrastar-15k600".into();
        opts.layout = LayoutKind::QMD;
        opts.members = 3;
        opts.flash_profile = Some("ssd".into());
        opts.member_bytes = Some(1 << 30);
        let r = replay(&opts).unwrap();
        let raid10 = replay(&options_for(path.clone(), "raid10", 2)).unwrap();
        std::fs::remove_file(path).unwrap();
        assert!(raid10.write_back.is_none(), "raid10 buffers nothing");
        let w = r.write_back.expect("qmd reports its write-back");
        assert!(
            r.members[1].figures.spin_downs >= 1,
            "the second disk slept"
        );
        assert!(w.peak_buffered_bytes >= 20 * 65536, "{w:?}");
        assert!(w.drained_bytes >= 20 * 65536, "{w:?}");
        assert!(w.emptied >= 1 && w.drain_bytes_per_s > 0.0, "{w:?}");
        assert!(r.members[1].figures.bytes_written >= 20 * 65536);
    }

    #[test]
    fn write_back_rate_counts_only_resolved_decreases() {
        let mut w = WriteBackReport::default();
        let mut last = None;
        for (t, b) in [
            (0.0, 0),
            (1.0, 100),
            (1.5, 60),
            (2.0, 0),
            (10.0, 50),
            (20.0, 0),
        ] {
            w.sample(&mut last, t, b);
        }
        let w = w.finish(20.0);
        assert_eq!(w.samples, 6);
        assert_eq!(w.peak_buffered_bytes, 100);
        assert_eq!(w.drained_bytes, 150);
        assert_eq!(w.unresolved_drained_bytes, 50, "50 bytes across a 10 s gap");
        assert_eq!(w.emptied, 2);
        assert!((w.draining_s - 1.0).abs() < 1e-9);
        assert!((w.drain_bytes_per_s - 100.0).abs() < 1e-9);
        // 100 for 0.5 s, 60 for 0.5 s, 50 for 10 s, over 20 s.
        assert!((w.mean_buffered_bytes - (50.0 + 30.0 + 500.0) / 20.0).abs() < 1e-9);
    }

    #[test]
    fn done_when_idle_timeout_scenario() {
        let path = trace("idle", &TWO_READS);
        let r = replay(&options(path.clone(), "idle-timeout:100")).unwrap();
        std::fs::remove_file(path).unwrap();
        let s = r.figures.state_seconds;
        assert_eq!(r.requests, 2);
        assert_eq!((r.figures.spin_downs, r.figures.spin_ups), (1, 1));
        assert!((s.idle - 100.0).abs() < 1e-6, "idle {}", s.idle);
        assert!((s.spinning_down - 15.0).abs() < 1e-6);
        assert!((s.spinning_up - 26.0).abs() < 1e-6);
        assert!((s.standby - (1000.0 - 115.0 - s.active / 2.0)).abs() < 0.05);
        let expected = 39.0 * s.active + 22.3 * s.idle + 62.25 + 4.15 * s.standby + 904.8;
        assert!((r.figures.energy_joules - expected).abs() < 1e-6);
        // The second request waited for the spin-up.
        assert!(r.figures.response_ms.max > 26_000.0);
        assert_eq!(r.members.len(), 1);
        assert_eq!(r.members[0].figures.spin_ups, 1);
    }

    #[test]
    fn done_when_always_on_scenario() {
        let path = trace("on", &TWO_READS);
        let r = replay(&options(path.clone(), "always-on")).unwrap();
        std::fs::remove_file(path).unwrap();
        assert_eq!((r.figures.spin_downs, r.figures.spin_ups), (0, 0));
        let e = r.figures.energy_joules;
        assert!((e - 22_300.0).abs() < 5.0, "{e}");
        assert!(r.figures.response_ms.max < 30.0);
    }

    /// A track-aligned RAID5 replay: a read of the first stripe's data reads every member
    /// once, the parity member too (the filled-in read), unless the option turns it off.
    #[test]
    fn a_track_aligned_raid5_replay_fills_in_the_parity_read() {
        let maps = (0..3)
            .map(|i| {
                layout::raid0_tracks::model_tracks("maxtor-atlas-10k-v", Some(i), 1 << 30).unwrap()
            })
            .collect();
        let l = layout::Raid5Tracks::with_tracks(maps, 1 << 30).unwrap();
        let stripe = 2 * l.stripe_starts()[1];
        let read = format!("0,h,0,Read,0,{stripe},0");
        let path = trace("raid5-tracks", &[read.as_str()]);
        let mut opts = options(path.clone(), "always-on");
        opts.profile = "maxtor-atlas-10k-v".into();
        opts.layout = layout::raid5_tracks::NAME.parse().unwrap();
        opts.members = 3;
        opts.member_bytes = Some(1 << 30);
        let r = replay(&opts).unwrap();
        let reads: Vec<_> = r.members.iter().map(|m| m.figures.reads).collect();
        assert_eq!(reads, vec![1, 1, 1]);
        opts.layout_options =
            crate::layout::LayoutOptions::from_pairs([("fill_parity_read", "false")]).unwrap();
        let r = replay(&opts).unwrap();
        std::fs::remove_file(path).unwrap();
        let reads: Vec<u64> = r.members.iter().map(|m| m.figures.reads).collect();
        assert_eq!(reads.iter().sum::<u64>(), 2, "{reads:?}");
    }

    /// `--layout-option stripe=per_member` reaches the replayed raid5-tracks: a read of
    /// row 0's data reads every member once (its own track 0, the parity's filled in); and
    /// a raid10-tracks replay reads pair 0's first row from one mirror, once.
    #[test]
    fn per_member_rows_and_raid10_tracks_replay_whole_rows() {
        let maps: Vec<_> = (0..3)
            .map(|i| {
                layout::raid0_tracks::model_tracks("maxtor-atlas-10k-v", Some(i), 1 << 30).unwrap()
            })
            .collect();
        let options = crate::layout::LayoutOptions::from_pairs([("stripe", "per_member")]).unwrap();
        let l = layout::Raid5Tracks::with_options(maps.clone(), 1 << 30, &options).unwrap();
        let row = 2 * l.unit_lens()[0];
        let read = format!("0,h,0,Read,0,{row},0");
        let path = trace("raid5-rows", &[read.as_str()]);
        let mut opts = options_for(path.clone(), layout::raid5_tracks::NAME, 3);
        opts.layout_options = options;
        let r = replay(&opts).unwrap();
        let reads: Vec<_> = r.members.iter().map(|m| m.figures.reads).collect();
        assert_eq!(reads, vec![1, 1, 1]);
        std::fs::remove_file(path).unwrap();
        let l = layout::Raid10Tracks::with_tracks(maps[..2].to_vec(), 1 << 30).unwrap();
        let read = format!("0,h,0,Read,0,{},0", l.row_lens(0)[0]);
        let path = trace("raid10-rows", &[read.as_str()]);
        let r = replay(&options_for(path.clone(), layout::raid10_tracks::NAME, 2)).unwrap();
        std::fs::remove_file(path).unwrap();
        let reads: Vec<u64> = r.members.iter().map(|m| m.figures.reads).collect();
        assert_eq!(reads.iter().sum::<u64>(), 1, "{reads:?}");
    }

    fn options_for(path: PathBuf, layout: &str, members: usize) -> ReplayOptions {
        let mut opts = options(path, "always-on");
        opts.profile = "maxtor-atlas-10k-v".into();
        opts.layout = layout.parse().unwrap();
        opts.members = members;
        opts.member_bytes = Some(1 << 30);
        opts
    }

    /// A track-aligned replay: member i is unit i, and a read of exactly the first track
    /// of member 0 (its first chunk) is one command on member 0 only.
    #[test]
    fn a_track_aligned_replay_reads_whole_member_tracks() {
        let first = layout::raid0_tracks::model_tracks("maxtor-atlas-10k-v", Some(0), 1 << 30)
            .unwrap()
            .start(1);
        let read = format!("0,h,0,Read,0,{first},0");
        let path = trace("tracks", &[read.as_str()]);
        let mut opts = options(path.clone(), "always-on");
        opts.profile = "maxtor-atlas-10k-v".into();
        opts.layout = layout::raid0_tracks::NAME.parse().unwrap();
        opts.members = 3;
        let r = replay(&opts).unwrap();
        std::fs::remove_file(path).unwrap();
        let reads: Vec<_> = r.members.iter().map(|m| m.figures.reads).collect();
        assert_eq!(reads, vec![1, 0, 0]);
        assert_eq!(r.stripe_unit % 512, 0);
    }

    #[test]
    fn raid10_writes_reach_both_members_of_a_pair() {
        let path = trace(
            "raid",
            &[
                "0,h,0,Write,0,4096,0",
                "10000,h,0,Write,65536,4096,0",
                "20000,h,0,Read,0,4096,0",
            ],
        );
        let mut opts = options(path.clone(), "always-on");
        opts.layout = LayoutKind::RAID10;
        opts.members = 4;
        let r = replay(&opts).unwrap();
        std::fs::remove_file(path).unwrap();
        let writes: Vec<_> = r.members.iter().map(|m| m.figures.writes).collect();
        assert_eq!(writes, vec![1, 1, 1, 1]);
        assert_eq!(r.figures.reads, 1);
    }

    #[test]
    fn state_seconds_add_up_to_the_duration_with_a_write_cache() {
        // Writes every 50 ms to scattered places: the write-back cache acknowledges them and
        // destages behind them, so the drive's own events interleave with the arrivals.
        let lines: Vec<String> = (0..400u64)
            .map(|i| {
                let offset = (i * 7_919_993 % 2_000_000) * 4096;
                format!("{},h,0,Write,{offset},8192,0", i * 500_000)
            })
            .collect();
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let path = trace("cached-writes", &lines);
        let mut opts = options(path.clone(), "always-on");
        opts.profile = "seagate-st1000nm0011".into();
        let r = replay(&opts).unwrap();
        std::fs::remove_file(path).unwrap();
        let s = r.members[0].figures.state_seconds;
        let booked = s.active + s.idle + s.standby + s.spinning_up + s.spinning_down;
        assert!(
            (booked - r.duration_s).abs() < 1e-6,
            "{booked} s booked over a {} s replay: {s:?}",
            r.duration_s
        );
    }

    #[test]
    fn disk_filter_skips_member_rows() {
        let path = trace("disk", &["0,h,0,Read,0,4096,0", "1,h,1,Read,0,4096,0"]);
        let mut opts = options(path.clone(), "always-on");
        opts.disk = Some(0);
        let r = replay(&opts).unwrap();
        std::fs::remove_file(path).unwrap();
        assert_eq!(r.requests, 1);
    }

    /// Reads and writes every 10 ms over a 4+2 member `raid5-ido-s` of 8 MiB members,
    /// member 1 failing at 1 s; (reconstruction report, requests).
    fn failed_mid_trace(mode: &str) -> (ReconstructionReport, u64) {
        let lines: Vec<String> = (0..3000u64)
            .map(|i| {
                let kind = if i % 3 == 0 { "Write" } else { "Read" };
                // A hot megabyte takes most reads; the rest spread over the volume.
                let offset = if i % 4 == 0 {
                    (i * 7_919 % 6_000) * 4096
                } else {
                    (i * 13 % 256) * 4096
                };
                format!("{},h,0,{kind},{offset},4096,0", i * 100_000)
            })
            .collect();
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let path = trace(&format!("fail-{mode}"), &lines);
        let mut opts = options(path.clone(), "always-on");
        opts.profile = "wd1600aajs".into();
        opts.layout = "raid5-ido-s".parse().unwrap();
        opts.members = 6;
        opts.member_bytes = Some(8 << 20);
        opts.layout_options = LayoutOptions::from_pairs([("rebuild", mode)]).unwrap();
        opts.failure = Some(FailureOptions {
            member: 1,
            at_s: 1.0,
            min_mb_s: 1.0,
            max_mb_s: 10.0,
            chunk: 65536,
        });
        let r = replay(&opts).unwrap();
        std::fs::remove_file(path).unwrap();
        (r.reconstruction.unwrap(), r.requests)
    }

    #[test]
    fn a_member_fails_inside_the_trace_and_a_spare_is_rebuilt() {
        let (pr, requests) = failed_mid_trace("pr");
        assert_eq!(requests, 3000);
        let took = pr.reconstruction_s.expect("PR rebuilt within the trace");
        // 8 MiB at 1 MB/s under user I/O: about 8 s (never faster than at 10 MB/s).
        assert!((0.8..12.0).contains(&took), "PR: {took} s");
        assert_eq!(pr.surrogate_share, 0.0, "PR leaves the surrogate idle");
        let (ido, _) = failed_mid_trace("ido");
        assert!(
            ido.reconstruction_s.is_some(),
            "IDO rebuilt within the trace"
        );
        assert!(
            ido.surrogate_share > 0.3,
            "IDO redirects the writes and the migrated hot zone's reads: {}",
            ido.surrogate_share
        );
        let bad = replay(&ReplayOptions {
            layout_options: LayoutOptions::from_pairs([("rebuild", "fastest")]).unwrap(),
            ..options(trace("badopt", &TWO_READS), "always-on")
        });
        assert!(format!("{:#}", bad.unwrap_err()).contains("rebuild"));
    }

    #[test]
    fn bad_line_is_reported_with_its_number() {
        let path = trace("bad", &["0,h,0,Read,0,4096,0", "oops"]);
        let err = format!(
            "{:#}",
            replay(&options(path.clone(), "always-on")).unwrap_err()
        );
        std::fs::remove_file(path).unwrap();
        assert!(err.contains("line 2"), "{err}");
    }
}
