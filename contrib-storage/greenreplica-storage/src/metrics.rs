//! Prometheus text exposition of the ledgers, I/O counts and latency histograms.

use std::fmt::Write;

use crate::latency::{Histogram, BUCKETS_S};
use crate::ledger::Ledger;
use crate::power_state::PowerState;
use crate::volume::{Health, Volume};

/// Metric name, help text and how to read it from a ledger.
type Counter = (&'static str, &'static str, fn(&Ledger) -> f64);

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP greenreplica_storage_{name} {help}");
    let _ = writeln!(out, "# TYPE greenreplica_storage_{name} {kind}");
}

fn histogram(out: &mut String, labels: &str, h: &Histogram) {
    let (buckets, count, sum) = h.snapshot();
    for (le, n) in BUCKETS_S.iter().zip(&buckets) {
        let _ = writeln!(
            out,
            "greenreplica_storage_io_latency_seconds_bucket{{{labels},le=\"{le}\"}} {n}"
        );
    }
    let _ = writeln!(
        out,
        "greenreplica_storage_io_latency_seconds_bucket{{{labels},le=\"+Inf\"}} {count}"
    );
    let _ = writeln!(
        out,
        "greenreplica_storage_io_latency_seconds_sum{{{labels}}} {sum}"
    );
    let _ = writeln!(
        out,
        "greenreplica_storage_io_latency_seconds_count{{{labels}}} {count}"
    );
}

/// One labelled series per volume (member="all") and per member.
fn series(volume: &Volume) -> Vec<(String, Ledger)> {
    let now = volume.clock().now();
    let ledgers = volume.member_ledgers(now);
    let mut out = vec![(
        format!("volume=\"{}\",member=\"all\"", volume.name()),
        Ledger::sum(&ledgers),
    )];
    for (i, l) in ledgers.into_iter().enumerate() {
        out.push((format!("volume=\"{}\",member=\"{i}\"", volume.name()), l));
    }
    out
}

pub fn render(volumes: &[&Volume]) -> String {
    let mut out = String::new();
    let all: Vec<_> = volumes.iter().map(|v| (*v, series(v))).collect();
    let counters: [Counter; 7] = [
        ("energy_joules_total", "Energy spent, joules", |l| {
            l.energy_joules
        }),
        ("spin_ups_total", "Spin-ups", |l| l.spin_ups as f64),
        ("spin_downs_total", "Spin-downs (start/stop cycles)", |l| {
            l.spin_downs as f64
        }),
        ("reads_total", "Read requests", |l| l.reads as f64),
        ("writes_total", "Write requests", |l| l.writes as f64),
        ("read_bytes_total", "Bytes read", |l| l.bytes_read as f64),
        ("written_bytes_total", "Bytes written", |l| {
            l.bytes_written as f64
        }),
    ];
    for (name, help, value) in counters {
        header(&mut out, name, "counter", help);
        for (_, series) in &all {
            for (labels, l) in series {
                let _ = writeln!(out, "greenreplica_storage_{name}{{{labels}}} {}", value(l));
            }
        }
    }
    for (name, help, joules) in [
        (
            "state_seconds_total",
            "Seconds spent per power state",
            false,
        ),
        ("state_joules_total", "Joules spent per power state", true),
    ] {
        header(&mut out, name, "counter", help);
        for (_, series) in &all {
            for (labels, l) in series {
                for s in PowerState::ALL {
                    let v = if joules {
                        l.state_joules.get(s)
                    } else {
                        l.state_seconds.get(s)
                    };
                    let _ = writeln!(
                        out,
                        "greenreplica_storage_{name}{{{labels},state=\"{s}\"}} {v}"
                    );
                }
            }
        }
    }
    header(
        &mut out,
        "member_up",
        "gauge",
        "1 if the member holds valid data, 0 if failed or rebuilding",
    );
    for v in volumes {
        for i in 0..v.member_count() {
            let up = v.slot(i).is_some_and(|s| s.health() == Health::InSync);
            let _ = writeln!(
                out,
                "greenreplica_storage_member_up{{volume=\"{}\",member=\"{i}\"}} {}",
                v.name(),
                u8::from(up)
            );
        }
    }
    header(
        &mut out,
        "io_latency_seconds",
        "histogram",
        "Request latency as served",
    );
    for v in volumes {
        histogram(
            &mut out,
            &format!("volume=\"{}\",member=\"all\"", v.name()),
            v.latency(),
        );
        for i in 0..v.member_count() {
            if let Some(h) = v.member_latency(i) {
                histogram(
                    &mut out,
                    &format!("volume=\"{}\",member=\"{i}\"", v.name()),
                    h,
                );
            }
        }
    }
    out
}
