//! Running external tools (hdparm) behind a trait so tests can use a fake.

use std::process::Command;

use anyhow::{bail, Context, Result};

pub trait CommandRunner: Send + Sync + std::fmt::Debug {
    /// Run `program args…`, returning its standard output; a non-zero exit is an error.
    fn run(&self, program: &str, args: &[&str]) -> Result<String>;
}

#[derive(Debug, Default)]
pub struct SystemRunner;

impl CommandRunner for SystemRunner {
    fn run(&self, program: &str, args: &[&str]) -> Result<String> {
        let out = Command::new(program)
            .args(args)
            .output()
            .with_context(|| format!("cannot run {program}"))?;
        if !out.status.success() {
            bail!(
                "{program} {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// A runner that records its calls and answers like hdparm, for tests.
#[cfg(test)]
#[derive(Debug, Default)]
pub struct RecordingRunner {
    pub calls: std::sync::Mutex<Vec<String>>,
}

#[cfg(test)]
impl CommandRunner for RecordingRunner {
    fn run(&self, program: &str, args: &[&str]) -> Result<String> {
        crate::sync::lock(&self.calls).push(format!("{program} {}", args.join(" ")));
        Ok(if args.first() == Some(&"-C") {
            "\n/dev/sdz:\n drive state is:  standby\n".into()
        } else {
            String::new()
        })
    }
}
