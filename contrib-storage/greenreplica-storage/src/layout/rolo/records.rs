//! The log index's journal records: a run logged (pair, home, length → logger, log offset,
//! generation), a run unlogged (its mirror is current again), and the duty (on-duty logger,
//! pairs destaging). Replaying a record twice leaves the same index.

use super::Entry;
use crate::layout::LayoutRecord;

pub(super) const REC_LOGGED: u16 = 1;
pub(super) const REC_UNLOGGED: u16 = 2;
pub(super) const REC_DUTY: u16 = 3;

pub(super) fn duty_record(on_duty: usize, destaging: &[bool]) -> LayoutRecord {
    let mut payload = (on_duty as u32).to_le_bytes().to_vec();
    payload.extend(destaging.iter().map(|&d| u8::from(d)));
    LayoutRecord {
        kind: REC_DUTY,
        payload,
    }
}

pub(super) fn logged_record(pair: usize, home: u64, e: &Entry) -> LayoutRecord {
    let mut payload = Vec::with_capacity(40);
    payload.extend((pair as u32).to_le_bytes());
    payload.extend(home.to_le_bytes());
    payload.extend(e.len.to_le_bytes());
    payload.extend((e.logger as u32).to_le_bytes());
    payload.extend(e.log_off.to_le_bytes());
    payload.extend(e.gen.to_le_bytes());
    LayoutRecord {
        kind: REC_LOGGED,
        payload,
    }
}

pub(super) fn unlogged_record(pair: usize, home: u64, len: u64) -> LayoutRecord {
    let mut payload = Vec::with_capacity(20);
    payload.extend((pair as u32).to_le_bytes());
    payload.extend(home.to_le_bytes());
    payload.extend(len.to_le_bytes());
    LayoutRecord {
        kind: REC_UNLOGGED,
        payload,
    }
}
