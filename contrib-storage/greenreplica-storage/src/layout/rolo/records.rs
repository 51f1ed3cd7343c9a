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

pub(super) struct Reader<'a>(pub(super) &'a [u8]);

impl Reader<'_> {
    pub(super) fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let (head, rest) = self
            .0
            .split_at_checked(N)
            .ok_or_else(|| "truncated rolo record".to_string())?;
        self.0 = rest;
        head.try_into().map_err(|_| "truncated rolo record".into())
    }
    pub(super) fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take::<1>()?[0])
    }
    pub(super) fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    pub(super) fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take()?))
    }
}
