//! The logged layouts' options (`[volume.layout_options]`): the log share of each mirror, the
//! fill at which the logger rotates (GRAID: destages), the fill at which the next logger is
//! woken ahead of its duty, and the zebra width of RoLo-S. Unset keys take the layout's
//! defaults; the options a volume was created with are kept in its member headers.

use crate::layout::{LayoutKind, LayoutOptions, ShapeProblem};

/// The paper's setting: a quarter of each mirror is log.
pub const DEFAULT_LOG_SHARE: f64 = 0.25;
/// The paper's threshold: rotate (GRAID: destage) at 80 % fill.
pub const DEFAULT_ROTATE_AT: f64 = 0.8;
/// Wake the next logger a tenth of the log before it is needed (0.7 with the default
/// rotate_at).
pub const DEFAULT_PREWAKE_MARGIN: f64 = 0.1;
/// RoLo-S's default zebra width (the middle of the paper's 32/64/128 MB).
pub const DEFAULT_ZEBRA_MB: u64 = 64;

/// RoLo's keys of `[volume.layout_options]` (the generic table, `layout::LayoutOptions`),
/// read when the layout is built: the log share and the zebra shape the member layout.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RoloOptions {
    /// Share of every logging member kept for its log region (RoLo; default 0.25).
    pub log_share: Option<f64>,
    /// Log fill at which the logger rotates, or GRAID destages (default 0.8).
    pub rotate_at: Option<f64>,
    /// Log fill at which the next logger is woken ahead of the rotation (RoLo; 0: never;
    /// default rotate_at - 0.1).
    pub prewake_at: Option<f64>,
    /// Width in MiB of one data band plus its log band (RoLo-S; default 64 for rolo-s, or
    /// what gives 16 bands on smaller members; no zebra for the others).
    pub zebra_mb: Option<u64>,
}

/// The keys RoLo reads; any other key of the table is refused by `set_option`.
pub const KEYS: [&str; 4] = ["log_share", "rotate_at", "prewake_at", "zebra_mb"];

/// The options in force, defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resolved {
    pub log_share: f64,
    pub rotate_at: f64,
    /// None: no pre-wake.
    pub prewake_at: Option<f64>,
    /// Zebra band width in bytes (None: one data region below one log region).
    pub zebra_bytes: Option<u64>,
}

fn problem(key: &'static str, problem: String) -> ShapeProblem {
    ShapeProblem { key, problem }
}

impl RoloOptions {
    /// RoLo's keys out of the volume's table (other keys are left to `set_option`).
    pub fn from_table(table: &LayoutOptions) -> Result<Self, ShapeProblem> {
        let num =
            |key: &'static str, full: &'static str| table.f64(key).map_err(|p| problem(full, p));
        Ok(Self {
            log_share: num("log_share", "layout_options.log_share")?,
            rotate_at: num("rotate_at", "layout_options.rotate_at")?,
            prewake_at: num("prewake_at", "layout_options.prewake_at")?,
            zebra_mb: table
                .u64("zebra_mb")
                .map_err(|p| problem("layout_options.zebra_mb", p))?,
        })
    }

    pub fn resolve(&self, kind: LayoutKind) -> Result<Resolved, ShapeProblem> {
        let name = kind.name();
        if name == "graid" {
            for (key, set) in [
                ("layout_options.log_share", self.log_share.is_some()),
                ("layout_options.prewake_at", self.prewake_at.is_some()),
                ("layout_options.zebra_mb", self.zebra_mb.is_some()),
            ] {
                if set {
                    return Err(problem(
                        key,
                        "layout graid logs to a whole dedicated member and wakes its mirrors \
                         only to destage: only rotate_at applies"
                            .into(),
                    ));
                }
            }
        }
        let log_share = self.log_share.unwrap_or(DEFAULT_LOG_SHARE);
        if !(0.05..=0.75).contains(&log_share) {
            return Err(problem(
                "layout_options.log_share",
                format!("log_share {log_share} must be between 0.05 and 0.75"),
            ));
        }
        let rotate_at = self.rotate_at.unwrap_or(DEFAULT_ROTATE_AT);
        if !(0.1..=1.0).contains(&rotate_at) {
            return Err(problem(
                "layout_options.rotate_at",
                format!("rotate_at {rotate_at} must be between 0.1 and 1.0 (a fill of the log)"),
            ));
        }
        let prewake = match (name, self.prewake_at) {
            ("graid", _) => None,
            (_, None) => Some(rotate_at - DEFAULT_PREWAKE_MARGIN),
            (_, Some(0.0)) => None,
            (_, Some(p)) => {
                if !(p > 0.0 && p < rotate_at) {
                    return Err(problem(
                        "layout_options.prewake_at",
                        format!(
                            "prewake_at {p} must be 0 (never) or above 0 and below rotate_at \
                             ({rotate_at})"
                        ),
                    ));
                }
                Some(p)
            }
        };
        let zebra_mb = match (name, self.zebra_mb) {
            ("rolo-s", None) => Some(DEFAULT_ZEBRA_MB),
            (_, z) => z,
        };
        if let Some(z) = zebra_mb {
            if !(1..=1 << 20).contains(&z) {
                return Err(problem(
                    "layout_options.zebra_mb",
                    format!("zebra_mb {z} must be between 1 and 1048576 (MiB)"),
                ));
            }
        }
        Ok(Resolved {
            log_share,
            rotate_at,
            prewake_at: prewake.filter(|p| *p > 0.0),
            zebra_bytes: zebra_mb.map(|z| z << 20),
        })
    }
}
