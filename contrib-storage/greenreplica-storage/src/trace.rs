//! Block traces in the MSR Cambridge CSV format (SNIA IOTTA):
//! `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, times in 100 ns ticks.
//! The reader feeds replays; the recorder writes the agent's own I/O in the same format.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use thiserror::Error;

use crate::service_model::IoKind;

/// Seconds between 1601-01-01 (FILETIME epoch) and 1970-01-01.
const FILETIME_UNIX_OFFSET_S: u64 = 11_644_473_600;
const TICKS_PER_S: f64 = 1e7;

#[derive(Debug, Error)]
pub enum TraceError {
    #[error("cannot open trace {path}: {cause}")]
    Open { path: String, cause: std::io::Error },
    #[error("trace {path}: line {line}: {problem}")]
    Line {
        path: String,
        line: u64,
        problem: String,
    },
    #[error("trace {path}: read error after line {line}: {cause}")]
    Read {
        path: String,
        line: u64,
        cause: std::io::Error,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct TraceRecord {
    /// FILETIME ticks (100 ns).
    pub timestamp: u64,
    pub hostname: String,
    pub disk: u32,
    pub kind: IoKind,
    pub offset: u64,
    pub size: u64,
    pub response_ticks: u64,
}

/// Parse one CSV line; `Ok(None)` for blank lines and a header line.
pub fn parse_line(text: &str) -> Result<Option<TraceRecord>, String> {
    let text = text.trim();
    if text.is_empty() || text.starts_with("Timestamp") {
        return Ok(None);
    }
    let fields: Vec<&str> = text.split(',').map(str::trim).collect();
    if fields.len() < 6 {
        return Err(format!(
            "expected 7 comma-separated fields (Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime), got {}",
            fields.len()
        ));
    }
    let number = |i: usize, name: &str| -> Result<u64, String> {
        fields[i]
            .parse::<u64>()
            .map_err(|e| format!("field {name} {:?}: {e}", fields[i]))
    };
    let kind = match fields[3].to_ascii_lowercase().as_str() {
        "read" => IoKind::Read,
        "write" => IoKind::Write,
        _ => {
            return Err(format!(
                "field Type {:?}: expected Read or Write",
                fields[3]
            ))
        }
    };
    let disk = u32::try_from(number(2, "DiskNumber")?)
        .map_err(|_| format!("field DiskNumber {:?} is too large", fields[2]))?;
    Ok(Some(TraceRecord {
        timestamp: number(0, "Timestamp")?,
        hostname: fields[1].to_string(),
        disk,
        kind,
        offset: number(4, "Offset")?,
        size: number(5, "Size")?,
        response_ticks: if fields.len() > 6 {
            number(6, "ResponseTime")?
        } else {
            0
        },
    }))
}

/// Streams records from a trace file, naming the line of any bad input.
pub struct TraceReader {
    path: String,
    lines: std::io::Lines<BufReader<File>>,
    line: u64,
}

impl TraceReader {
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        let file = File::open(path).map_err(|cause| TraceError::Open {
            path: path.display().to_string(),
            cause,
        })?;
        Ok(Self {
            path: path.display().to_string(),
            lines: BufReader::with_capacity(1 << 20, file).lines(),
            line: 0,
        })
    }
}

impl Iterator for TraceReader {
    type Item = Result<TraceRecord, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let text = match self.lines.next()? {
                Ok(t) => t,
                Err(cause) => {
                    return Some(Err(TraceError::Read {
                        path: self.path.clone(),
                        line: self.line,
                        cause,
                    }))
                }
            };
            self.line += 1;
            match parse_line(&text) {
                Ok(Some(r)) => return Some(Ok(r)),
                Ok(None) => continue,
                Err(problem) => {
                    return Some(Err(TraceError::Line {
                        path: self.path.clone(),
                        line: self.line,
                        problem,
                    }))
                }
            }
        }
    }
}

pub fn format_record(r: &TraceRecord) -> String {
    format!(
        "{},{},{},{},{},{},{}",
        r.timestamp,
        r.hostname,
        r.disk,
        match r.kind {
            IoKind::Read => "Read",
            IoKind::Write => "Write",
        },
        r.offset,
        r.size,
        r.response_ticks
    )
}

pub fn filetime_now() -> u64 {
    let since_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (since_unix.as_secs() + FILETIME_UNIX_OFFSET_S) * 10_000_000
        + u64::from(since_unix.subsec_nanos() / 100)
}

pub fn ticks_to_seconds(ticks: u64) -> f64 {
    ticks as f64 / TICKS_PER_S
}

/// Appends the agent's I/O to a trace: disk 0 is the volume, disk k+1 is member k.
#[derive(Debug)]
pub struct TraceRecorder {
    host: String,
    out: Mutex<BufWriter<File>>,
}

impl TraceRecorder {
    pub fn create(path: &Path, host: &str) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            host: host.to_string(),
            out: Mutex::new(BufWriter::new(file)),
        })
    }

    pub fn record(&self, disk: u32, kind: IoKind, offset: u64, size: u64, response_s: f64) {
        let line = format_record(&TraceRecord {
            timestamp: filetime_now(),
            hostname: self.host.clone(),
            disk,
            kind,
            offset,
            size,
            response_ticks: (response_s.max(0.0) * TICKS_PER_S) as u64,
        });
        if let Ok(mut out) = self.out.lock() {
            // A trace is diagnostic: losing a line must never fail the I/O it describes.
            if let Err(e) = writeln!(out, "{line}") {
                tracing::warn!(error = %e, "cannot write I/O trace line");
            }
        }
    }

    pub fn flush(&self) {
        if let Ok(mut out) = self.out.lock() {
            if let Err(e) = out.flush() {
                tracing::warn!(error = %e, "cannot flush I/O trace");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_msr_line() {
        let r = parse_line("128166372003061629,hm,1,Read,3154247680,4096,1331")
            .unwrap()
            .unwrap();
        assert_eq!(r.kind, IoKind::Read);
        assert_eq!(
            (r.disk, r.offset, r.size, r.response_ticks),
            (1, 3154247680, 4096, 1331)
        );
    }

    #[test]
    fn skips_blank_and_header_lines() {
        assert_eq!(parse_line("").unwrap(), None);
        assert_eq!(
            parse_line("Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime").unwrap(),
            None
        );
    }

    #[test]
    fn reader_names_the_bad_line() {
        let path = std::env::temp_dir().join(format!("grs-trace-{}.csv", std::process::id()));
        std::fs::write(&path, "0,h,0,Read,0,4096,0\n\n1,h,0,Erase,0,4096,0\n").unwrap();
        let results: Vec<_> = TraceReader::open(&path).unwrap().collect();
        std::fs::remove_file(&path).unwrap();
        assert!(results[0].is_ok());
        let err = results[1].as_ref().unwrap_err().to_string();
        assert!(err.contains("line 3") && err.contains("Erase"), "{err}");
    }

    #[test]
    fn recorder_output_reads_back() {
        let path = std::env::temp_dir().join(format!("grs-rec-{}.csv", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let rec = TraceRecorder::create(&path, "vol").unwrap();
        rec.record(0, IoKind::Write, 8192, 4096, 0.001);
        rec.flush();
        let back: Vec<_> = TraceReader::open(&path).unwrap().collect();
        std::fs::remove_file(&path).unwrap();
        let r = back[0].as_ref().unwrap();
        assert_eq!(
            (r.kind, r.offset, r.size, r.response_ticks),
            (IoKind::Write, 8192, 4096, 10_000)
        );
        assert_eq!(r.hostname, "vol");
    }
}
