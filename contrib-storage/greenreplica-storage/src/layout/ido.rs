//! `raid5-ido` and `raid6-ido`: MD's RAID5/6 (`Raid56`, unchanged) with IDO's zone table and
//! hot-first reconstruction (Wu et al., FAST'12). Reads feed the zone table in the normal
//! state; the standby's hint marks the zones a batch is about to read; when a member is
//! rebuilt, the hinted zones go first, then the hot ones, then the cold ones in address order.
//! A separate layout name rather than an option: the name is recorded in the member headers,
//! so an assembled volume keeps its rebuild order with no extra header field, and plain
//! `raid5`/`raid6` stay byte-for-byte MD's PR.
//!
//! Inside a zone a rebuild goes in address order, so what it has copied of a zone is a
//! prefix: the plans of a request see a rebuilding member valid below
//! `max(watermark, zone's prefix)`, zone by zone (zones are whole stripes, so no stripe is cut).
//! Not yet: migration of hot zones to a surrogate RAID1, the D Map and reclaim (issue 17).

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::zone_table::{self, Changes, ZoneTable, RECONSTRUCTED};
use super::{
    Buf, Compute, LayoutError, LayoutKind, LayoutRecord, MemberIo, MemberView, Personality, Plan,
    Raid56, Reconcile, Reserved, Role, Shape, SyncCopy,
};
use crate::parity::Level;
use crate::service_model::IoKind;
use crate::sync::lock;

/// Journal record kinds (issue 17): the whole zone table, and the zones read since.
pub const ZONE_TABLE_RECORD: u16 = 0x1701;
pub const ZONE_DELTA_RECORD: u16 = 0x1702;

#[derive(Debug)]
pub struct Ido {
    inner: Raid56,
    kind: LayoutKind,
    /// Member bytes per zone (the zone's volume bytes over the data chunks of a stripe).
    zone_member_bytes: u64,
    zones: Mutex<ZoneTable>,
    /// Per rebuilding member: per zone, the end of the prefix its rebuild has copied.
    progress: Mutex<BTreeMap<usize, Vec<u64>>>,
}

impl Ido {
    pub fn new(level: Level, shape: &Shape) -> Result<Self, LayoutError> {
        let inner = Raid56::new(level, shape)?;
        let stripe = inner.stripe_unit() * (shape.members - level.parity_count()) as u64;
        let zone = zone_table::zone_bytes_for(inner.capacity(), stripe);
        Self::with_zone_bytes(level, inner, zone)
    }

    /// With zones of `zone_bytes` volume bytes (rounded down to whole stripes, at least one).
    pub fn with_zone_bytes(
        level: Level,
        inner: Raid56,
        zone_bytes: u64,
    ) -> Result<Self, LayoutError> {
        let name = match level {
            Level::Raid5 => "raid5-ido",
            Level::Raid6 => "raid6-ido",
        };
        let kind: LayoutKind = name.parse().map_err(|e: String| LayoutError::Shape {
            layout: inner.kind(),
            problem: e,
        })?;
        let k = inner.capacity() / inner.member_data_bytes().max(1);
        let stripe = inner.stripe_unit() * k;
        let zone_bytes = (zone_bytes / stripe).max(1) * stripe;
        Ok(Self {
            zone_member_bytes: zone_bytes / k,
            zones: Mutex::new(ZoneTable::new(zone_bytes, inner.capacity())),
            inner,
            kind,
            progress: Mutex::new(BTreeMap::new()),
        })
    }

    /// A copy of the zone table (tests, status).
    pub fn zone_table(&self) -> ZoneTable {
        lock(&self.zones).clone()
    }

    fn zone_count(&self) -> usize {
        lock(&self.zones).len()
    }

    /// Member bytes of zone `z`.
    fn zone_span(&self, z: usize) -> (u64, u64) {
        let start = z as u64 * self.zone_member_bytes;
        let end = (start + self.zone_member_bytes).min(self.inner.member_data_bytes());
        (start, end)
    }

    /// A fresh progress vector for a rebuild that has copied everything below `watermark`.
    fn initial_progress(&self, watermark: u64) -> Vec<u64> {
        (0..self.zone_count())
            .map(|z| {
                let (start, end) = self.zone_span(z);
                watermark.clamp(start, end)
            })
            .collect()
    }

    /// The views of a plan inside zone `z`: each rebuilding member is valid below what its
    /// rebuild copied there.
    fn zone_views(
        &self,
        views: &[MemberView],
        z: usize,
        progress: &BTreeMap<usize, Vec<u64>>,
    ) -> Vec<MemberView> {
        let mut views = views.to_vec();
        for (&m, done) in progress {
            if let (Some(v), Some(&end)) = (views.get_mut(m), done.get(z)) {
                if v.writable && v.valid_below < u64::MAX {
                    v.valid_below = v.valid_below.max(end);
                }
            }
        }
        views
    }

    fn rebuilding(views: &[MemberView], progress: &BTreeMap<usize, Vec<u64>>) -> bool {
        progress.keys().any(|&m| {
            views
                .get(m)
                .is_some_and(|v| v.writable && v.valid_below < u64::MAX)
        })
    }
}

/// Append `part` (planned for the caller's bytes from `caller`) to `plan`.
fn append(plan: &mut Plan, part: Plan, caller: u64) {
    let base = plan.scratch.len();
    let shift = |b: Buf| match b {
        Buf::Caller(o) => Buf::Caller(o + caller),
        Buf::Scratch(i, o) => Buf::Scratch(i + base, o),
    };
    let io = |io: MemberIo| MemberIo {
        buf: shift(io.buf),
        ..io
    };
    plan.scratch.extend(part.scratch);
    plan.reads.extend(part.reads.into_iter().map(io));
    plan.writes.extend(part.writes.into_iter().map(io));
    plan.compute
        .extend(part.compute.into_iter().map(|c| match c {
            Compute::Copy { from, to, len } => Compute::Copy {
                from: shift(from),
                to: shift(to),
                len,
            },
            Compute::Syndrome { data, p, q, len } => Compute::Syndrome {
                data: data.into_iter().map(shift).collect(),
                p: shift(p),
                q: q.map(shift),
                len,
            },
            Compute::Delta {
                index,
                old,
                new,
                p,
                q,
                len,
            } => Compute::Delta {
                index,
                old: shift(old),
                new: shift(new),
                p: p.map(shift),
                q: q.map(shift),
                len,
            },
            Compute::Reconstruct {
                level,
                chunks,
                lost,
                len,
            } => Compute::Reconstruct {
                level,
                chunks: chunks.into_iter().map(shift).collect(),
                lost,
                len,
            },
        }));
}

impl Personality for Ido {
    fn kind(&self) -> LayoutKind {
        self.kind
    }

    fn member_count(&self) -> usize {
        self.inner.member_count()
    }

    fn member_data_bytes(&self) -> u64 {
        self.inner.member_data_bytes()
    }

    fn stripe_unit(&self) -> u64 {
        self.inner.stripe_unit()
    }

    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }

    fn role(&self, member: usize) -> Role {
        self.inner.role(member)
    }

    fn reserved(&self) -> Vec<Reserved> {
        self.inner.reserved()
    }

    fn plan(
        &self,
        kind: IoKind,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        self.check_range(offset, len)?;
        if kind == IoKind::Read {
            lock(&self.zones).read_hit(offset, len);
        }
        let progress = lock(&self.progress);
        if !Self::rebuilding(views, &progress) {
            return self.inner.plan(kind, offset, len, views);
        }
        // Zone by zone, each with what the rebuild copied there.
        let zone_bytes = lock(&self.zones).zone_bytes();
        let mut plan = Plan::default();
        let mut at = offset;
        while at < offset + len {
            let z = (at / zone_bytes) as usize;
            let end = ((z as u64 + 1) * zone_bytes).min(offset + len);
            let views = self.zone_views(views, z, &progress);
            let part = self.inner.plan(kind, at, end - at, &views)?;
            append(&mut plan, part, at - offset);
            at = end;
        }
        Ok(plan)
    }

    fn read_members(
        &self,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Vec<usize>, LayoutError> {
        // A wake's planning is not a read hit.
        self.inner.read_members(offset, len, views)
    }

    fn complete(&self, plan: &Plan) {
        self.inner.complete(plan)
    }

    /// What the zone table learned since the last write (the paper keeps it in NVRAM; here
    /// it is as durable as the next acknowledged write).
    fn journal_records(&self, _plan: &Plan) -> Vec<LayoutRecord> {
        match lock(&self.zones).take_changes() {
            Changes::None => Vec::new(),
            Changes::Full(payload) => vec![LayoutRecord {
                kind: ZONE_TABLE_RECORD,
                payload,
            }],
            Changes::Delta(payload) => vec![LayoutRecord {
                kind: ZONE_DELTA_RECORD,
                payload,
            }],
        }
    }

    /// The table is advice (which zones to rebuild first), not data: one that cannot be
    /// replayed is dropped with a warning and the volume starts with an empty one.
    fn replay(&self, image: Option<&[u8]>, records: &[LayoutRecord]) -> Result<(), String> {
        let mut zones = lock(&self.zones);
        let replayed = image
            .map_or(Ok(()), |image| zones.load(image))
            .and_then(|()| {
                records.iter().try_for_each(|r| match r.kind {
                    ZONE_TABLE_RECORD => zones.load(&r.payload),
                    ZONE_DELTA_RECORD => zones.load_delta(&r.payload),
                    other => Err(format!("unknown layout record kind {other:#x}")),
                })
            });
        if let Err(problem) = replayed {
            tracing::warn!(layout = %self.kind, %problem,
                "the journaled zone table cannot be replayed; starting with an empty one (the rebuild order forgets the past reads)");
            *zones = ZoneTable::new(zones.zone_bytes(), self.inner.capacity());
        }
        Ok(())
    }

    /// Records journaled after the image set the same values again: replay stays right.
    fn checkpoint_image(&self) -> Option<Vec<u8>> {
        Some(lock(&self.zones).image())
    }

    fn recover(
        &self,
        member: usize,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        let progress = lock(&self.progress);
        let z = (offset / self.zone_member_bytes.max(1)) as usize;
        let in_one_zone = offset + len <= self.zone_span(z).1;
        if in_one_zone && Self::rebuilding(views, &progress) {
            let views = self.zone_views(views, z, &progress);
            return self.inner.recover(member, offset, len, &views);
        }
        self.inner.recover(member, offset, len, views)
    }

    fn sync_groups(&self) -> Vec<Vec<usize>> {
        self.inner.sync_groups()
    }

    fn lock_spans(&self, offset: u64, len: u64) -> Vec<(usize, u64, u64)> {
        self.inner.lock_spans(offset, len)
    }

    fn reconcile(&self, offset: u64, group: &[SyncCopy], len: u64) -> Result<Reconcile, String> {
        self.inner.reconcile(offset, group, len)
    }

    fn survives(&self, valid: &[bool]) -> bool {
        self.inner.survives(valid)
    }

    fn hint(&self, extents: &[(u64, u64)]) {
        lock(&self.zones).hint(extents);
    }

    fn metadata_bytes(&self) -> u64 {
        // Progress before zones, as everywhere (one guard at a time here).
        let progress: u64 = lock(&self.progress)
            .values()
            .map(|p| (p.capacity() * 8) as u64)
            .sum();
        progress + lock(&self.zones).memory_bytes()
    }

    fn member_replaced(&self, member: usize) {
        lock(&self.progress).remove(&member);
        lock(&self.zones).clear_flag(RECONSTRUCTED);
    }

    /// Finish the zone in progress, then the next in the table's order (hinted, hot, cold).
    fn rebuild_next(&self, member: usize, watermark: u64, chunk: u64) -> (u64, u64) {
        let mut progress = lock(&self.progress);
        let done = progress
            .entry(member)
            .or_insert_with(|| self.initial_progress(watermark));
        let pending = |z: usize| done[z] < self.zone_span(z).1;
        let started = (0..done.len()).find(|&z| pending(z) && done[z] > self.zone_span(z).0);
        let next = started.or_else(|| {
            lock(&self.zones)
                .rebuild_order()
                .into_iter()
                .find(|&z| pending(z))
        });
        match next {
            Some(z) => (done[z], chunk.max(1).min(self.zone_span(z).1 - done[z])),
            None => {
                let end = self.member_data_bytes();
                (watermark, chunk.max(1).min(end.saturating_sub(watermark)))
            }
        }
    }

    fn rebuilt(&self, member: usize, offset: u64, len: u64, watermark: u64) -> u64 {
        let mut progress = lock(&self.progress);
        let done = progress
            .entry(member)
            .or_insert_with(|| self.initial_progress(watermark));
        let z = (offset / self.zone_member_bytes.max(1)) as usize;
        if let Some(end) = done.get_mut(z) {
            if offset <= *end {
                *end = (*end).max(offset + len);
            }
            if *end >= self.zone_span(z).1 {
                lock(&self.zones).set_flag(z, RECONSTRUCTED);
            }
        }
        // The valid prefix runs on through every zone copied to its end.
        let mut prefix = watermark;
        while let Some(&end) = done.get((prefix / self.zone_member_bytes.max(1)) as usize) {
            if end <= prefix {
                break;
            }
            prefix = end;
        }
        prefix.min(self.member_data_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raid5(zone: u64) -> Ido {
        let shape = Shape {
            members: 3,
            member_bytes: 1 << 20,
            chunk: 16384,
            options: Default::default(),
        };
        Ido::with_zone_bytes(
            Level::Raid5,
            Raid56::new(Level::Raid5, &shape).unwrap(),
            zone,
        )
        .unwrap()
    }

    #[test]
    fn reads_count_but_a_wake_does_not() {
        let ido = raid5(256 << 10);
        let views = vec![MemberView::healthy(0.0); 3];
        ido.plan(IoKind::Read, 300 << 10, 4096, &views).unwrap();
        ido.plan(IoKind::Write, 0, 4096, &views).unwrap();
        ido.read_members(0, 4096, &views).unwrap();
        let t = ido.zone_table();
        assert_eq!(t.popularity(1), 1);
        assert_eq!(t.popularity(0), 0);
        assert!(ido.metadata_bytes() >= 8 * 5);
    }

    #[test]
    fn the_rebuild_takes_hinted_then_hot_zones_then_cold_ones_in_order() {
        // 2 MiB in 8 zones of 256 KiB (128 KiB per member).
        let ido = raid5(256 << 10);
        let views = vec![MemberView::healthy(0.0); 3];
        for _ in 0..3 {
            ido.plan(IoKind::Read, 5 * (256 << 10), 4096, &views)
                .unwrap();
        }
        ido.hint(&[(6 * (256 << 10), 1)]);
        let zm = 128 << 10;
        let mut order = Vec::new();
        let mut watermark = 0;
        while watermark < ido.member_data_bytes() {
            let (offset, len) = ido.rebuild_next(1, watermark, 48 << 10);
            assert!(len > 0 && offset + len <= ido.member_data_bytes());
            let z = offset / zm;
            if order.last() != Some(&z) {
                order.push(z);
            }
            watermark = ido.rebuilt(1, offset, len, watermark);
        }
        assert_eq!(order, vec![6, 5, 0, 1, 2, 3, 4, 7]);
        assert!((0..8).all(|z| ido.zone_table().flags(z) & RECONSTRUCTED != 0));
        ido.member_replaced(1);
        assert_eq!(ido.zone_table().flags(0) & RECONSTRUCTED, 0);
    }

    #[test]
    fn a_zone_table_that_cannot_be_replayed_is_dropped_not_half_applied() {
        let ido = raid5(256 << 10);
        let views = vec![MemberView::healthy(0.0); 3];
        ido.plan(IoKind::Read, 0, 4096, &views).unwrap();
        let image = ido.checkpoint_image().unwrap();
        let good = LayoutRecord {
            kind: ZONE_DELTA_RECORD,
            payload: {
                ido.plan(IoKind::Read, 256 << 10, 4096, &views).unwrap();
                match lock(&ido.zones).take_changes() {
                    Changes::Delta(d) => d,
                    other => panic!("{other:?}"),
                }
            },
        };
        let back = raid5(256 << 10);
        back.replay(Some(&image), std::slice::from_ref(&good))
            .unwrap();
        assert_eq!(back.zone_table().popularity(0), 1);
        assert_eq!(back.zone_table().popularity(1), 1);
        let foreign = LayoutRecord {
            kind: 0x7777,
            payload: Vec::new(),
        };
        let back = raid5(256 << 10);
        back.replay(Some(&image), &[good, foreign]).unwrap();
        assert_eq!(back.zone_table(), raid5(256 << 10).zone_table());
    }

    #[test]
    fn a_plan_across_zones_is_the_zones_plans_joined() {
        let ido = raid5(64 << 10);
        let plain = Raid56::new(
            Level::Raid5,
            &Shape {
                members: 3,
                member_bytes: 1 << 20,
                chunk: 16384,
                options: Default::default(),
            },
        )
        .unwrap();
        let mut views = vec![MemberView::healthy(0.0); 3];
        views[2] = MemberView {
            valid_below: 0,
            writable: true,
            ready_at: 0.0,
        };
        // Member 2 rebuilt zone 1 (member bytes 32..64 KiB) only.
        let (o, l) = (32 << 10, 32 << 10);
        ido.member_replaced(2);
        lock(&ido.progress).insert(2, ido.initial_progress(0));
        assert_eq!(ido.rebuilt(2, o, l, 0), 0);
        // A write over zones 0..3: in zone 1 member 2 is valid, elsewhere it is not.
        let plan = ido
            .plan(IoKind::Write, 16 << 10, 160 << 10, &views)
            .unwrap();
        let mut valid = views.clone();
        valid[2].valid_below = u64::MAX;
        let mut expect = plain
            .plan(IoKind::Write, 16 << 10, 48 << 10, &views)
            .unwrap();
        append(
            &mut expect,
            plain
                .plan(IoKind::Write, 64 << 10, 64 << 10, &valid)
                .unwrap(),
            48 << 10,
        );
        append(
            &mut expect,
            plain
                .plan(IoKind::Write, 128 << 10, 48 << 10, &views)
                .unwrap(),
            112 << 10,
        );
        assert_eq!(plan, expect);
    }
}
