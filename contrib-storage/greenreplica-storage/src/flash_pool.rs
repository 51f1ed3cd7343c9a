//! An agent-level flash pool: one flash file or device (`[[flash]]` in the configuration)
//! whose write-buffer space several QMD volumes share, cut into fixed-size extents.
//!
//! The pool owns the extent bitmap and keeps, in its own metadata journal
//! (`state_dir/flash-NAME.journal/`, the format of `src/journal/`), which volume holds
//! which extent. Each volume still records its own extents in its volume-info record (in
//! its own journal); the two journals are committed separately, so the crash rule is:
//!
//! * **Take before use.** An extent is given to a volume by a committed pool record before
//!   the volume writes anything into it (`take` commits before it returns).
//! * **Restart.** After a volume's replay, [`FlashPool::settle`] compares the pool's
//!   extents of the volume (P) with the ones its volume info lists (I): P \ I (taken, the
//!   volume's record never durable) go back to the pool; I \ P (released by the pool, which
//!   does that only when the volume reclaimed the extent empty) are dropped from the
//!   volume's info. The volume keeps I ∩ P, so no extent is ever held by two volumes.
//! * **Release.** A volume releases an extent when it reclaims it (nothing live, the
//!   records that emptied it durable); the release record is committed with the pool's
//!   next commit (a crash before that is the P \ I case above).
//! * **Removed volumes.** A volume no longer in the configuration keeps its extents: its
//!   buffered data may be the only copy of a cold pair's newest writes. Only the operator's
//!   [`FlashPool::release_volume`] (control request `release_flash`) frees them.
//!
//! Layout of the pool's storage: `HEADER_SLOTS` header areas of `DATA_OFFSET` bytes (one
//! per volume, the volume's flash-member header), then the shared data area. A volume sees
//! the pool through a [`PoolMember`]: its own header slot, then the whole data area (its
//! flash offsets are pool offsets; it writes only into the extents it holds). The first
//! MiB of the data area is never given out: a new volume's blank check reads it.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::journal::Journal;
use crate::member::{Member, MemberKind};
use crate::superblock::DATA_OFFSET;
use crate::sync::lock;

/// Volumes one pool can serve (header slots at the start of its storage).
pub const HEADER_SLOTS: u64 = 16;
/// Bytes before the data area.
pub const HEADER_AREA: u64 = HEADER_SLOTS * DATA_OFFSET;
/// Most extents a pool is cut into (its tables stay small).
pub const MAX_EXTENTS: u64 = 1 << 20;
/// Longest volume name the pool journal accepts.
const MAX_NAME: usize = 255;
/// The pool journal is checkpointed when its log grows past this.
const CHECKPOINT_LOG_BYTES: u64 = 1 << 20;

const REC_SHAPE: u16 = 1;
const REC_TAKE: u16 = 2;
const REC_RELEASE: u16 = 3;
const REC_SLOT: u16 = 4;

/// A pool journal record (JSON payloads; the snapshot is a [`PoolImage`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Shape {
    data_bytes: u64,
    extent_bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ExtentRecord {
    extent: u32,
    volume: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SlotRecord {
    slot: u32,
    volume: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct PoolImage {
    shape: Option<Shape>,
    owners: Vec<ExtentRecord>,
    slots: Vec<SlotRecord>,
}

#[derive(Debug, Default)]
struct PoolState {
    /// Per extent: the volume holding it.
    owner: Vec<Option<Arc<str>>>,
    /// Header slot → volume.
    slots: BTreeMap<u32, Arc<str>>,
    /// Volumes assembled on the pool in this run.
    attached: BTreeSet<String>,
    /// Attached volumes whose extents were reconciled (`settle`) in this run.
    settled: BTreeSet<String>,
}

/// A flash pool shared by QMD volumes (see the module documentation).
#[derive(Debug)]
pub struct FlashPool {
    name: String,
    data_bytes: u64,
    extent_bytes: u64,
    journal: Journal,
    state: Mutex<PoolState>,
    /// Extents held: the fill is asked for at every write completion of every volume,
    /// without waiting for the lock a `take` holds through its commit.
    used: AtomicUsize,
    store: Option<Arc<dyn Member>>,
}

fn check_name(volume: &str) -> Result<()> {
    if volume.is_empty() || volume.len() > MAX_NAME || volume.contains('\0') {
        bail!("flash pool: volume name {volume:?} is empty, too long or has a NUL");
    }
    Ok(())
}

/// The extent size a pool of `data_bytes` uses when none is configured: a sixteenth of the
/// data area, at most 1 GiB, whole MiB.
pub fn default_extent_bytes(data_bytes: u64) -> u64 {
    ((data_bytes / 16).min(1 << 30) >> 20 << 20).max(1 << 20)
}

/// Check a pool's shape (configuration and journal): hostile sizes get an error.
pub fn check_shape(data_bytes: u64, extent_bytes: u64) -> Result<(), String> {
    if extent_bytes == 0 || !extent_bytes.is_multiple_of(4096) {
        return Err(format!(
            "extent size {extent_bytes} must be a positive multiple of 4096 bytes"
        ));
    }
    let count = data_bytes / extent_bytes;
    if count > MAX_EXTENTS {
        return Err(format!(
            "{data_bytes} bytes in extents of {extent_bytes} make {count} extents, more than \
             {MAX_EXTENTS}"
        ));
    }
    if count <= DATA_OFFSET.div_ceil(extent_bytes) {
        return Err(format!(
            "{data_bytes} bytes hold no extent of {extent_bytes} bytes after the first MiB \
             (kept zero)"
        ));
    }
    Ok(())
}

impl FlashPool {
    /// Open the pool's journal in `journal_dir` and replay it; `data_bytes` and
    /// `extent_bytes` are the configured shape (a different shape is refused while any
    /// extent is held).
    pub fn open(
        name: &str,
        data_bytes: u64,
        extent_bytes: u64,
        journal_dir: &Path,
        store: Option<Arc<dyn Member>>,
    ) -> Result<Self> {
        check_shape(data_bytes, extent_bytes).map_err(|e| anyhow::anyhow!("flash {name}: {e}"))?;
        let (journal, replay) =
            Journal::open(journal_dir).with_context(|| format!("flash {name}: pool journal"))?;
        let mut image = match &replay.snapshot {
            Some(s) => serde_json::from_slice::<PoolImage>(&s.bytes)
                .with_context(|| format!("flash {name}: pool journal snapshot"))?,
            None => PoolImage::default(),
        };
        let mut owners: BTreeMap<u32, String> = BTreeMap::new();
        for o in image.owners.drain(..) {
            if owners.insert(o.extent, o.volume).is_some() {
                bail!(
                    "flash {name}: the pool snapshot lists extent {} twice",
                    o.extent
                );
            }
        }
        let mut slots: BTreeMap<u32, String> =
            image.slots.drain(..).map(|s| (s.slot, s.volume)).collect();
        let mut shape = image.shape;
        for r in &replay.records {
            let bad = |e: serde_json::Error| {
                anyhow::anyhow!("flash {name}: pool journal record {}: {e}", r.seq)
            };
            match r.kind {
                REC_SHAPE => shape = Some(serde_json::from_slice(&r.payload).map_err(bad)?),
                REC_TAKE => {
                    let t: ExtentRecord = serde_json::from_slice(&r.payload).map_err(bad)?;
                    if let Some(other) = owners.get(&t.extent) {
                        bail!(
                            "flash {name}: the pool journal gives extent {} to {} while {other} \
                             holds it",
                            t.extent,
                            t.volume
                        );
                    }
                    owners.insert(t.extent, t.volume);
                }
                REC_RELEASE => {
                    let t: ExtentRecord = serde_json::from_slice(&r.payload).map_err(bad)?;
                    if owners.get(&t.extent) != Some(&t.volume) {
                        bail!(
                            "flash {name}: the pool journal releases extent {} from {}, which \
                             does not hold it",
                            t.extent,
                            t.volume
                        );
                    }
                    owners.remove(&t.extent);
                }
                REC_SLOT => {
                    let s: SlotRecord = serde_json::from_slice(&r.payload).map_err(bad)?;
                    slots.retain(|_, v| *v != s.volume);
                    slots.insert(s.slot, s.volume);
                }
                other => bail!("flash {name}: unknown pool journal record kind {other}"),
            }
        }
        let count = (data_bytes / extent_bytes) as usize;
        let shape_changed = shape
            .as_ref()
            .is_none_or(|s| s.data_bytes != data_bytes || s.extent_bytes != extent_bytes);
        if shape_changed && !owners.is_empty() {
            let s = shape
                .as_ref()
                .map_or((0, 0), |s| (s.data_bytes, s.extent_bytes));
            bail!(
                "flash {name}: configured as {data_bytes} bytes in extents of {extent_bytes}, \
                 but volumes hold extents of the pool as it was ({} bytes in extents of {}); \
                 restore the old size or release the volumes' extents first",
                s.0,
                s.1
            );
        }
        let mut owner: Vec<Option<Arc<str>>> = vec![None; count];
        for (e, v) in owners {
            check_name(&v)?;
            match owner.get_mut(e as usize) {
                Some(o) if (e as u64) >= Self::first_usable(extent_bytes) => *o = Some(v.into()),
                _ => bail!("flash {name}: the pool journal names extent {e}, outside the pool"),
            }
        }
        for v in slots.values() {
            check_name(v)?;
        }
        if let Some((&bad, _)) = slots.iter().find(|(&s, _)| u64::from(s) >= HEADER_SLOTS) {
            bail!("flash {name}: the pool journal names header slot {bad}");
        }
        let used = owner.iter().filter(|o| o.is_some()).count();
        let pool = Self {
            name: name.to_string(),
            data_bytes,
            extent_bytes,
            journal,
            used: AtomicUsize::new(used),
            state: Mutex::new(PoolState {
                owner,
                slots: slots.into_iter().map(|(s, v)| (s, v.into())).collect(),
                attached: BTreeSet::new(),
                settled: BTreeSet::new(),
            }),
            store,
        };
        if shape_changed {
            let shape = Shape {
                data_bytes,
                extent_bytes,
            };
            pool.journal
                .append(REC_SHAPE, &serde_json::to_vec(&shape)?)?;
            pool.journal.commit()?;
        }
        Ok(pool)
    }

    /// The first extent past the data area's first MiB (kept zero).
    fn first_usable(extent_bytes: u64) -> u64 {
        DATA_OFFSET.div_ceil(extent_bytes)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn extent_bytes(&self) -> u64 {
        self.extent_bytes
    }

    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    /// Extents of the pool (the first ones, in the zero MiB, are never given out).
    pub fn count(&self) -> usize {
        (self.data_bytes / self.extent_bytes) as usize
    }

    /// Share of the usable extents held by some volume.
    pub fn fill(&self) -> f64 {
        let usable = self.count() as u64 - Self::first_usable(self.extent_bytes);
        self.used.load(Ordering::Relaxed) as f64 / usable.max(1) as f64
    }

    fn append<T: Serialize>(&self, kind: u16, record: &T) -> Result<()> {
        self.journal.append(kind, &serde_json::to_vec(record)?)?;
        Ok(())
    }

    /// Give `volume` the lowest free extent; the record is durable before this returns.
    /// `None` when the pool is full.
    pub fn take(&self, volume: &str) -> Result<Option<u32>> {
        check_name(volume)?;
        let mut st = lock(&self.state);
        let first = Self::first_usable(self.extent_bytes) as usize;
        let Some(e) = (first..st.owner.len()).find(|&e| st.owner[e].is_none()) else {
            return Ok(None);
        };
        let rec = ExtentRecord {
            extent: e as u32,
            volume: volume.to_string(),
        };
        self.append(REC_TAKE, &rec)?;
        self.journal
            .commit()
            .with_context(|| format!("flash {}: committing extent {e}", self.name))?;
        st.owner[e] = Some(volume.into());
        self.used.fetch_add(1, Ordering::Relaxed);
        drop(st);
        self.maybe_checkpoint();
        Ok(Some(e as u32))
    }

    /// `volume` gives `extent` back (reclaimed empty); durable with the next commit.
    pub fn release(&self, volume: &str, extent: u32) -> Result<()> {
        let mut st = lock(&self.state);
        self.release_locked(&mut st, volume, extent)
    }

    fn release_locked(&self, st: &mut PoolState, volume: &str, extent: u32) -> Result<()> {
        match st.owner.get(extent as usize) {
            Some(Some(v)) if &**v == volume => {}
            other => bail!(
                "flash {}: volume {volume} releases extent {extent}, held by {:?}",
                self.name,
                other.cloned().flatten()
            ),
        }
        self.append(
            REC_RELEASE,
            &ExtentRecord {
                extent,
                volume: volume.to_string(),
            },
        )?;
        st.owner[extent as usize] = None;
        self.used.fetch_sub(1, Ordering::Relaxed);
        Ok(())
    }

    /// The extents the pool gives `volume`, lowest first.
    pub fn held(&self, volume: &str) -> Vec<u32> {
        let st = lock(&self.state);
        Self::held_locked(&st, volume)
    }

    fn held_locked(st: &PoolState, volume: &str) -> Vec<u32> {
        (0..st.owner.len())
            .filter(|&e| st.owner[e].as_deref() == Some(volume))
            .map(|e| e as u32)
            .collect()
    }

    /// Attach `volume` (assembly) and give it its header slot: an existing one, or the
    /// lowest free one (committed). Refused when a volume of that name is attached already
    /// or every slot is taken.
    pub fn attach(&self, volume: &str) -> Result<u32> {
        check_name(volume)?;
        let mut st = lock(&self.state);
        if st.attached.contains(volume) {
            bail!("flash {}: volume {volume} is attached already", self.name);
        }
        let slot = match st.slots.iter().find(|(_, v)| &***v == volume) {
            Some((&s, _)) => s,
            None => {
                let Some(s) = (0..HEADER_SLOTS as u32).find(|s| !st.slots.contains_key(s)) else {
                    bail!(
                        "flash {}: all {HEADER_SLOTS} volume slots are taken (release a removed \
                         volume's extents first)",
                        self.name
                    );
                };
                self.append(
                    REC_SLOT,
                    &SlotRecord {
                        slot: s,
                        volume: volume.to_string(),
                    },
                )?;
                self.journal.commit()?;
                st.slots.insert(s, volume.into());
                s
            }
        };
        st.attached.insert(volume.to_string());
        Ok(slot)
    }

    /// After `volume`'s replay: reconcile the pool's extents of the volume with the ones
    /// its volume info lists (the crash rule in the module documentation). Returns the
    /// extents the volume keeps, in the volume info's order.
    pub fn settle(&self, volume: &str, listed: &[u32]) -> Result<Vec<u32>> {
        let mut st = lock(&self.state);
        let held: BTreeSet<u32> = Self::held_locked(&st, volume).into_iter().collect();
        let listed_set: BTreeSet<u32> = listed.iter().copied().collect();
        for &e in held.difference(&listed_set) {
            tracing::info!(pool = %self.name, volume, extent = e,
                "extent taken but never recorded by the volume: back to the pool");
            self.release_locked(&mut st, volume, e)?;
        }
        for e in listed_set.difference(&held) {
            tracing::info!(pool = %self.name, volume, extent = e,
                "extent released to the pool before the volume's record was durable: dropped");
        }
        self.journal.commit()?;
        st.settled.insert(volume.to_string());
        Ok(listed
            .iter()
            .copied()
            .filter(|e| held.contains(e))
            .collect())
    }

    /// Whether `volume`'s extents were reconciled since it was attached.
    pub fn settled(&self, volume: &str) -> bool {
        lock(&self.state).settled.contains(volume)
    }

    /// The volume stopped (or its assembly failed): it may be attached again.
    pub fn detach(&self, volume: &str) {
        let mut st = lock(&self.state);
        st.attached.remove(volume);
        st.settled.remove(volume);
    }

    /// The operator's release of a volume no longer assembled: every extent it holds and
    /// its header slot go back to the pool. Refused for an attached volume.
    pub fn release_volume(&self, volume: &str) -> Result<usize> {
        check_name(volume)?;
        let mut st = lock(&self.state);
        if st.attached.contains(volume) {
            bail!(
                "flash {}: volume {volume} is assembled on the pool; its extents are released \
                 by its own flushes",
                self.name
            );
        }
        let held = Self::held_locked(&st, volume);
        let has_slot = st.slots.values().any(|v| &**v == volume);
        if held.is_empty() && !has_slot {
            bail!(
                "flash {}: volume {volume} holds nothing in the pool",
                self.name
            );
        }
        for &e in &held {
            self.release_locked(&mut st, volume, e)?;
        }
        if let Some((&slot, _)) = st.slots.iter().find(|(_, v)| &***v == volume) {
            // Its header goes too: a later volume given the slot must find it blank.
            if let Some(store) = &self.store {
                store
                    .write_at(
                        &vec![0u8; DATA_OFFSET as usize],
                        u64::from(slot) * DATA_OFFSET,
                    )
                    .and_then(|()| store.flush())
                    .with_context(|| format!("flash {}: clearing slot {slot}", self.name))?;
            }
            st.slots.remove(&slot);
        }
        // A snapshot without the volume's slot (a slot record cannot be undone).
        let image = Self::image_locked(&st, self);
        self.journal.commit()?;
        self.journal.checkpoint(&serde_json::to_vec(&image)?)?;
        tracing::warn!(pool = %self.name, volume, extents = held.len(),
            "operator released a removed volume's flash extents");
        Ok(held.len())
    }

    fn image_locked(st: &PoolState, pool: &FlashPool) -> PoolImage {
        PoolImage {
            shape: Some(Shape {
                data_bytes: pool.data_bytes,
                extent_bytes: pool.extent_bytes,
            }),
            owners: st
                .owner
                .iter()
                .enumerate()
                .filter_map(|(e, o)| {
                    o.as_ref().map(|v| ExtentRecord {
                        extent: e as u32,
                        volume: v.to_string(),
                    })
                })
                .collect(),
            slots: st
                .slots
                .iter()
                .map(|(&slot, v)| SlotRecord {
                    slot,
                    volume: v.to_string(),
                })
                .collect(),
        }
    }

    fn maybe_checkpoint(&self) {
        if self.journal.log_bytes() < CHECKPOINT_LOG_BYTES {
            return;
        }
        let st = lock(&self.state);
        let image = Self::image_locked(&st, self);
        let done = serde_json::to_vec(&image)
            .map_err(anyhow::Error::from)
            .and_then(|b| self.journal.checkpoint(&b));
        if let Err(e) = done {
            tracing::warn!(pool = %self.name, error = %e, "pool journal checkpoint failed");
        }
    }

    /// Status: size, free extents, per-volume extents (and whether it is assembled).
    pub fn status(&self) -> serde_json::Value {
        let st = lock(&self.state);
        let mut per: BTreeMap<&str, usize> = BTreeMap::new();
        for v in st.owner.iter().flatten() {
            *per.entry(v).or_default() += 1;
        }
        for v in st.slots.values() {
            per.entry(v).or_default();
        }
        let first = Self::first_usable(self.extent_bytes) as usize;
        let free = st.owner[first.min(st.owner.len())..]
            .iter()
            .filter(|o| o.is_none())
            .count();
        serde_json::json!({
            "name": self.name,
            "data_bytes": self.data_bytes,
            "extent_bytes": self.extent_bytes,
            "extents": self.count().saturating_sub(first),
            "free_extents": free,
            "volumes": per.iter().map(|(v, n)| serde_json::json!({
                "volume": v,
                "extents": n,
                "assembled": st.attached.contains(*v),
            })).collect::<Vec<_>>(),
        })
    }

    /// The view of the pool's storage volume `volume` uses as its flash member.
    pub fn member_for(&self, volume: &str) -> Result<Arc<dyn Member>> {
        let Some(store) = &self.store else {
            bail!("flash {}: the pool has no storage open", self.name);
        };
        let slot = {
            let st = lock(&self.state);
            st.slots
                .iter()
                .find(|(_, v)| &***v == volume)
                .map(|(&s, _)| s)
        };
        let Some(slot) = slot else {
            bail!("flash {}: volume {volume} is not attached", self.name);
        };
        Ok(Arc::new(PoolMember {
            store: store.clone(),
            slot: u64::from(slot),
            data_bytes: self.data_bytes,
        }))
    }
}

/// A volume's view of the pool's storage: its header slot, then the shared data area.
#[derive(Debug)]
pub struct PoolMember {
    store: Arc<dyn Member>,
    slot: u64,
    data_bytes: u64,
}

impl PoolMember {
    /// Split `[offset, offset + len)` of the view into pieces of the pool's storage.
    fn pieces(&self, offset: u64, len: u64) -> io::Result<Vec<(u64, u64, usize)>> {
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.size())
            .ok_or_else(|| io::Error::other("flash pool: access beyond the volume's view"))?;
        let mut out = Vec::new();
        let mut at = offset;
        while at < end {
            let (pool_at, n) = if at < DATA_OFFSET {
                (
                    self.slot * DATA_OFFSET + at,
                    (DATA_OFFSET - at).min(end - at),
                )
            } else {
                (HEADER_AREA + at - DATA_OFFSET, end - at)
            };
            out.push((pool_at, n, (at - offset) as usize));
            at += n;
        }
        Ok(out)
    }
}

impl Member for PoolMember {
    fn kind(&self) -> MemberKind {
        self.store.kind()
    }
    fn describe(&self) -> String {
        format!("{} (pool slot {})", self.store.describe(), self.slot)
    }
    fn size(&self) -> u64 {
        DATA_OFFSET + self.data_bytes
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        for (pool_at, n, b) in self.pieces(offset, buf.len() as u64)? {
            self.store.read_at(&mut buf[b..b + n as usize], pool_at)?;
        }
        Ok(())
    }
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        for (pool_at, n, b) in self.pieces(offset, data.len() as u64)? {
            self.store.write_at(&data[b..b + n as usize], pool_at)?;
        }
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.store.flush()
    }
}

#[cfg(test)]
mod tests;
