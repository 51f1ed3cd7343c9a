//! Personalities (Linux MD's model): each layout is one `Personality` that says how volume
//! bytes sit on its members and how to serve, recover and check them. The engine (`volume`)
//! executes what a personality plans — reads, then computations on scratch buffers, then
//! writes — and owns everything shared by all layouts: range and stripe locks, the
//! write-intent bitmap, member health and generations. A new layout is one file here and one
//! line in the registry (`registry.rs`).

pub mod boundaries;
mod ido;
mod ido_dmap;
mod ido_surrogate;
mod mirror;
mod options;
mod pair_striped;
mod qmd;
pub mod raid0_tracks;
mod raid10;
pub mod raid10_tracks;
mod raid56;
pub mod raid5_tracks;
mod registry;
mod rolo;
mod single;
pub(crate) mod zone_table;

use std::fmt;

use thiserror::Error;

pub use ido::Ido;
pub use ido_surrogate::Mode as IdoMode;
pub use options::LayoutOptions;
pub use qmd::{FlushParams as QmdFlushParams, Qmd};
pub use raid0_tracks::Raid0Tracks;
pub use raid10::Raid10;
pub use raid10_tracks::Raid10Tracks;
pub use raid56::Raid56;
pub use raid5_tracks::Raid5Tracks;
pub use registry::{build, build_with, LayoutKind, Registration, Shape, ShapeProblem, REGISTRY};
pub use rolo::{seek_distance, Flavour as RoloFlavour, Rolo};
pub use single::Single;
pub use zone_table::ZoneTable;

use crate::clock::Seconds;
use crate::parity::Level;
use crate::service_model::IoKind;

#[derive(Debug, Error, PartialEq)]
pub enum LayoutError {
    #[error("layout {layout}: {problem}")]
    Shape { layout: LayoutKind, problem: String },
    #[error("no live copy of volume bytes {offset}..{end}")]
    NoLiveCopy { offset: u64, end: u64 },
    #[error("volume range {offset}+{len} is beyond the volume size {size}")]
    OutOfRange { offset: u64, len: u64, size: u64 },
    #[error("member {member} bytes {offset}+{len} cannot be recovered: {problem}")]
    Unrecoverable {
        member: usize,
        offset: u64,
        len: u64,
        problem: String,
    },
}

/// Where the bytes of one member I/O come from or go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buf {
    /// The caller's buffer at this offset (the data read, or the data to write).
    Caller(u64),
    /// A scratch buffer of the plan at this offset (old data, parity, reconstructed chunks).
    Scratch(usize, u64),
}

/// One piece of a request on one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberIo {
    pub member: usize,
    pub member_offset: u64,
    pub len: u64,
    pub buf: Buf,
}

/// A computation between the read and the write phase (parity, reconstruction). The engine
/// runs them in order on the plan's buffers (`crate::parity` does the arithmetic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compute {
    Copy {
        from: Buf,
        to: Buf,
        len: u64,
    },
    /// P (and Q) of the data chunks `data` (in data-index order).
    Syndrome {
        data: Vec<Buf>,
        p: Buf,
        q: Option<Buf>,
        len: u64,
    },
    /// Read-modify-write: data index `index` changes from `old` to `new`; P and Q (when
    /// kept) hold the old parity of the same bytes and become the new one.
    Delta {
        index: usize,
        old: Buf,
        new: Buf,
        p: Option<Buf>,
        q: Option<Buf>,
        len: u64,
    },
    /// Rebuild the chunks `lost` (indices into `chunks`: the data chunks, then P, then Q)
    /// in place from the others.
    Reconstruct {
        level: Level,
        chunks: Vec<Buf>,
        lost: Vec<usize>,
        len: u64,
    },
}

/// What a request becomes: reads (into the caller's buffer or scratch), computations, then
/// writes (from the caller's buffer or scratch). Phases run in this order; members within a
/// phase in parallel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Sizes of the scratch buffers the plan uses.
    pub scratch: Vec<u64>,
    pub reads: Vec<MemberIo>,
    pub compute: Vec<Compute>,
    pub writes: Vec<MemberIo>,
    /// Pieces of a write the member gets later: the engine hands their bytes (from the
    /// caller's buffer) to `Personality::stage` when the write completes, and the
    /// personality appends them at the next flush (`staged_appends`; QMD's staging buffer).
    /// They are no member I/O of the request.
    pub stage: Vec<MemberIo>,
}

impl Plan {
    /// Every member I/O of the plan, reads first.
    pub fn ios(&self) -> impl Iterator<Item = (IoKind, &MemberIo)> {
        self.reads
            .iter()
            .map(|io| (IoKind::Read, io))
            .chain(self.writes.iter().map(|io| (IoKind::Write, io)))
    }
}

/// Bytes a personality keeps on a member for its own metadata (QMD's address blocks),
/// written by a volume flush before its journal commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataBlock {
    pub member: usize,
    pub offset: u64,
    pub bytes: Vec<u8>,
}

/// What a layout needs to know about a member to plan around it.
#[derive(Debug, Clone, Copy)]
pub struct MemberView {
    /// Member bytes below this offset hold valid data (u64::MAX: all; 0: none).
    pub valid_below: u64,
    /// Writes may go to it (a rebuilding replacement accepts writes before it is valid).
    pub writable: bool,
    /// When it could start serving a new request (spun down members are far in the future).
    pub ready_at: Seconds,
    /// Commands waiting in its drive's queue, not yet in service (0: none or unknown).
    pub queued: usize,
    /// How many of the queued commands the drive's scheduler chooses among, the oldest
    /// first: a command queued behind more waits for those ahead of it whatever its class
    /// (usize::MAX: unknown, no limit).
    pub window: usize,
}

impl MemberView {
    pub fn healthy(ready_at: Seconds) -> Self {
        Self {
            valid_below: u64::MAX,
            writable: true,
            ready_at,
            queued: 0,
            window: usize::MAX,
        }
    }

    pub fn failed(ready_at: Seconds) -> Self {
        Self {
            valid_below: 0,
            writable: false,
            ready_at,
            queued: 0,
            window: usize::MAX,
        }
    }

    pub fn holds(&self, offset: u64, len: u64) -> bool {
        self.valid_below >= offset + len
    }
}

/// What a member is for (MD keeps the same distinction between data, parity and spares;
/// later layouts add log, flash and surrogate members).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Data,
    /// Holds data and parity chunks in rotation (RAID5/6).
    DataAndParity,
    Parity,
    Log,
    Flash,
    Surrogate,
    Spare,
}

/// Member bytes a personality keeps for itself (logs, maps); the engine never plans
/// foreground I/O there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserved {
    pub member: usize,
    pub start: u64,
    pub len: u64,
}

/// One member's bytes of a sync unit as read by resync or scrub.
#[derive(Debug, Clone)]
pub struct SyncCopy {
    pub member: usize,
    /// None: the member is not in sync (its bytes cannot vouch for anything).
    pub bytes: Option<Vec<u8>>,
    /// Per `SYNC_BLOCK` of `bytes`: whether it could be read.
    pub readable: Vec<bool>,
}

/// Unit of readability in `SyncCopy` (a page: the unit a disk remaps).
pub const SYNC_BLOCK: u64 = 4096;

/// Verdict of a sync unit: the member bytes to rewrite to make it consistent.
/// A personality's record in the volume's metadata journal: its own `kind` (below 0x8000)
/// and bytes only it interprets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutRecord {
    pub kind: u16,
    pub payload: Vec<u8>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconcile {
    pub rewrites: Vec<(usize, Vec<u8>)>,
}

/// A layout. Offsets given to and returned by a personality are data offsets (the engine
/// adds the header area).
pub trait Personality: Send + Sync + fmt::Debug {
    fn kind(&self) -> LayoutKind;
    fn member_count(&self) -> usize;
    /// Usable bytes per member (after the layout's rounding).
    fn member_data_bytes(&self) -> u64;
    /// Chunk (stripe unit) size; 0 for layouts that do not stripe.
    fn stripe_unit(&self) -> u64;
    /// Size of the volume in bytes.
    fn capacity(&self) -> u64;

    fn role(&self, _member: usize) -> Role {
        Role::Data
    }

    fn reserved(&self) -> Vec<Reserved> {
        Vec::new()
    }

    /// Turn a request into a plan. `views` say which members can serve which bytes.
    fn plan(
        &self,
        kind: IoKind,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError>;

    /// The members a write of volume bytes `offset..offset+len` (within the volume) would
    /// touch now, without planning it; None: the layout cannot tell (the volume then wakes
    /// as for reading them). QMD: the flash alone for a cold pair asleep whole.
    fn write_members(&self, _offset: u64, _len: u64, _views: &[MemberView]) -> Option<Vec<usize>> {
        None
    }

    /// The members a read of volume bytes `offset..offset+len` needs (what a hinted wake
    /// spins up): the members its read plan touches, which is one copy per mirror pair (the
    /// readiest), the data members of parity chunks, or the single member. A range longer
    /// than `member_count²` chunks repeats the layout's pattern, so only that much is planned.
    fn read_members(
        &self,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Vec<usize>, LayoutError> {
        self.check_range(offset, len)?;
        let n = self.member_count() as u64;
        let pattern = self.stripe_unit().max(1).saturating_mul(n * n);
        let plan = self.plan(IoKind::Read, offset, len.min(pattern), views)?;
        let mut members: Vec<usize> = plan.reads.iter().map(|io| io.member).collect();
        members.sort_unstable();
        members.dedup();
        Ok(members)
    }

    /// Called after a plan's writes landed (layouts that redirect writes update their index
    /// here; the static layouts need nothing).
    fn complete(&self, _plan: &Plan) {}

    /// A plan from `plan` will not complete (a write failed on the way and the survivors
    /// do not hold every byte): release what planning reserved (QMD's flash slots).
    fn abandon(&self, _plan: &Plan) {}

    /// The bytes of one of `plan.stage`'s pieces, handed over when its write completes
    /// (before `complete`, in the same step as the flush's `staged_appends`, so a flush
    /// finds every completed write's bytes). Without bytes (a replay moves none) zeros.
    fn stage(&self, _io: &MemberIo, _bytes: &[u8]) {}

    /// A flush starts: the staged bytes to write to the members now, before the metadata
    /// blocks (QMD: one append per run of adjacent flash slots). The engine writes them,
    /// failing a member whose write fails, then calls `staged_appended`.
    fn staged_appends(&self) -> Vec<MetadataBlock> {
        Vec::new()
    }

    /// The bytes of the last `staged_appends` are on their members (or the member failed).
    fn staged_appended(&self) {}

    /// The staged bytes should be appended now, before the next flush (QMD: half the
    /// staging space is taken): the engine does so after the write that made it so.
    fn staged_due(&self) -> bool {
        false
    }

    /// The personality's own metadata records for what `plan` changed (its index, root or
    /// table), taken right after `complete`, once the data has landed. The engine appends
    /// them to the volume's metadata journal and makes them durable before the flush that
    /// acknowledges the write returns. Replaying a record twice must leave the same state:
    /// a checkpoint image may already reflect it.
    fn journal_records(&self, _plan: &Plan) -> Vec<LayoutRecord> {
        Vec::new()
    }

    /// Rebuild the personality's metadata at start: the image of the last checkpoint (if
    /// it gave one), then every record journaled after it, in order.
    fn replay(&self, _image: Option<&[u8]>, _records: &[LayoutRecord]) -> Result<(), String> {
        Ok(())
    }

    /// After `replay`: the personality's metadata blocks on its members (`read(member,
    /// offset, len)`, None when that member cannot be read), e.g. QMD's address blocks.
    fn replay_blocks(
        &self,
        _read: &mut dyn FnMut(usize, u64, u64) -> Option<Vec<u8>>,
    ) -> Result<(), String> {
        Ok(())
    }

    /// A flush starts: the metadata blocks to write to the members first. The engine
    /// writes them, makes them durable, then calls `metadata_blocks_written` (always, after
    /// each call here) and appends the records it returns before committing.
    fn metadata_blocks(&self, _views: &[MemberView]) -> Vec<MetadataBlock> {
        Vec::new()
    }

    /// The blocks of the last `metadata_blocks` are durable (true) or not all written;
    /// returns the records that point at them (QMD's address root).
    fn metadata_blocks_written(&self, _durable: bool) -> Vec<LayoutRecord> {
        Vec::new()
    }

    /// Every record handed out by `journal_records` so far is durable (a flush committed
    /// the journal; without a journal, every tick): space the records freed may be reused.
    fn committed(&self) {}

    /// The personality's whole metadata, for a journal checkpoint; None if it keeps none
    /// (its records, if any, are then carried from checkpoint to checkpoint).
    fn checkpoint_image(&self) -> Option<Vec<u8>> {
        None
    }

    /// A plan that puts member `member`'s bytes `offset..offset+len` into the caller's buffer
    /// without reading that member: a rebuild, and MD's fix_read_error.
    fn recover(
        &self,
        member: usize,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError>;

    /// One rebuild step of `member`'s bytes `offset..offset+len`: `recover`'s plan, to which
    /// a layout may add writes of what the step reads anyway (IDO hands a hot zone's stripes
    /// to its surrogate set, so migrating the zone costs no second read). The engine runs
    /// the writes with the step and completes a plan with writes like a background plan
    /// (`complete`, `journal_records`).
    fn rebuild_plan(
        &self,
        member: usize,
        offset: u64,
        len: u64,
        views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        self.recover(member, offset, len, views)
    }

    /// The members whose bytes at the same member offsets depend on each other (a mirror
    /// pair, a parity stripe). Locks, resync and scrub work per group.
    fn sync_groups(&self) -> Vec<Vec<usize>>;

    /// Member byte ranges, per sync group (its lowest member), that a request to volume bytes
    /// `offset..offset+len` must hold: at least the bytes it touches, a whole stripe for
    /// layouts that read-modify-write parity.
    fn lock_spans(&self, offset: u64, len: u64) -> Vec<(usize, u64, u64)>;

    /// Resync and scrub: given every live member of a group at member bytes
    /// `offset..offset+len`, the bytes to rewrite so that the group is consistent again
    /// (copies equal, parity right). Err: the group cannot be made consistent.
    fn reconcile(&self, offset: u64, group: &[SyncCopy], len: u64) -> Result<Reconcile, String>;

    /// Every byte is still readable when exactly the members marked true hold valid data.
    fn survives(&self, valid: &[bool]) -> bool;

    /// When the personality wants to run background work of its own next (destage,
    /// reclaim); None: it has none. Rebuild, resync and scrub are driven by the engine.
    fn next_wakeup(&self, _now: Seconds) -> Option<Seconds> {
        None
    }

    /// The volume range of the next piece of background work (RoLo's destage), if there is
    /// one the members in `views` can do now. The engine locks the range, then runs
    /// `background_plan` (reads into a buffer, writes from it) and completes it like a
    /// write (`complete`, `journal_records`).
    fn background_work(&self, _views: &[MemberView]) -> Option<(u64, u64)> {
        None
    }

    /// Make every piece of deferred background work due now (a drain: RoLo destages every
    /// pair, so each mirror is current again).
    fn background_all(&self) {}

    /// The plan of the background work `background_work` named.
    fn background_plan(
        &self,
        offset: u64,
        len: u64,
        _views: &[MemberView],
    ) -> Result<Plan, LayoutError> {
        self.check_range(offset, len)?;
        Ok(Plan::default())
    }

    /// Members the layout will send I/O to soon and wants spinning by then (RoLo's next
    /// logger, woken at its pre-wake fill); each is handed out once. The engine wakes those
    /// asleep through the power manager's wake path.
    fn prewake(&self) -> Vec<usize> {
        Vec::new()
    }

    /// The members the layout needs spinning in their current role (RoLo: the primaries
    /// and the on-duty logger; RoLo-E: the on-duty pair), handed to the power manager on
    /// every tick (`PowerManager::pin`); None: no opinion.
    fn pinned(&self) -> Option<Vec<usize>> {
        None
    }

    /// The standby's hint: these volume extents (offset, len) are about to be read
    /// (layouts that track popularity, IDO, mark them hot).
    fn hint(&self, _extents: &[(u64, u64)]) {}

    /// Set a layout option (`KEY=VALUE` of the configuration or the replay command line)
    /// before the volume serves I/O; layouts without options refuse every key.
    fn set_option(&self, key: &str, _value: &str) -> Result<(), String> {
        Err(format!("layout {} has no option {key:?}", self.kind()))
    }

    /// Whether an option decides where bytes live (RoLo's log share and zebra, QMD's buffer
    /// and extent size, IDO's zones): such options must match the members' headers when a
    /// volume is assembled again; the others (a rebuild order, a flush budget) may change.
    fn option_places_data(&self, _key: &str) -> bool {
        true
    }

    /// Mark volume extents `temperature` ("hot", "cold" or "normal"; QMD's partial on-line
    /// mirrors); the change is handed out by `journal_records`. Returns the ranges now
    /// marked. Layouts without temperatures refuse.
    fn set_temperature(
        &self,
        _extents: &[(u64, u64)],
        _temperature: &str,
    ) -> Result<usize, String> {
        Err(format!(
            "layout {} keeps no hot or cold ranges",
            self.kind()
        ))
    }

    /// The marked ranges: (offset, length, "hot" or "cold").
    fn temperatures(&self) -> Vec<(u64, u64, &'static str)> {
        Vec::new()
    }

    /// Sync groups (by their lowest member) holding only cold data: a policy may let every
    /// member of them sleep.
    fn cold_groups(&self) -> Vec<usize> {
        Vec::new()
    }

    /// Take the flash write buffer's extents from an agent-level pool shared with other
    /// volumes (called by assembly before `replay`); only QMD buffers in flash.
    fn attach_flash_pool(
        &self,
        pool: std::sync::Arc<crate::flash_pool::FlashPool>,
        _volume: &str,
    ) -> Result<(), String> {
        Err(format!(
            "layout {} has no flash write buffer to take from flash pool {}",
            self.kind(),
            pool.name()
        ))
    }

    /// What the layout is doing, for the volume status (RoLo: the on-duty logger, the
    /// rotations since the agent started, the pairs destaging); None: nothing to say.
    fn layout_state(&self) -> Option<serde_json::Value> {
        None
    }

    /// Bytes of memory the personality's own metadata takes (zone tables, maps).
    fn metadata_bytes(&self) -> u64 {
        0
    }

    /// A replacement went into `member`'s slot: a rebuild starts from nothing.
    fn member_replaced(&self, _member: usize) {}

    /// What the layout keeps in member `member`'s metadata area, as (member byte offset,
    /// bytes), written onto a replacement so that it is reassembled as the member it
    /// replaced (track layouts: the boundary list the data was placed by).
    fn member_metadata(&self, _member: usize) -> Vec<(u64, Vec<u8>)> {
        Vec::new()
    }

    /// Rebuild: the member bytes `(offset, len)` to copy next onto rebuilding `member`, of
    /// which everything below `watermark` is valid. Default: the next `chunk` bytes in
    /// order (MD's PR); IDO takes hot zones first.
    fn rebuild_next(&self, member: usize, watermark: u64, chunk: u64) -> (u64, u64) {
        let _ = member;
        let end = self.member_data_bytes();
        (watermark, chunk.max(1).min(end.saturating_sub(watermark)))
    }

    /// Rebuild: member bytes `offset..offset+len` are on the replacement now; returns the
    /// new watermark (everything below it valid).
    fn rebuilt(&self, _member: usize, offset: u64, len: u64, _watermark: u64) -> u64 {
        offset + len
    }

    /// It keeps redundancy: any single member can be lost and rebuilt.
    fn redundant(&self) -> bool {
        let n = self.member_count();
        (0..n).all(|lost| self.survives(&(0..n).map(|m| m != lost).collect::<Vec<_>>()))
    }

    /// The sync group (its lowest member) that a member belongs to.
    fn group_of(&self, member: usize) -> usize {
        self.sync_groups()
            .into_iter()
            .find(|g| g.contains(&member))
            .and_then(|g| g.into_iter().min())
            .unwrap_or(member)
    }

    /// Volume offsets inside `offset..offset+len` where a request's member I/O is cut (a
    /// chunk ends; for the track-aligned layouts, a member track ends), ascending, at most
    /// `cap` of them. None: the layout has none to offer. The default reads them off the
    /// layout's own read plan for layouts that stripe (`stripe_unit() > 0`), so the answer
    /// is always the cuts its plans make; a layout may answer otherwise by overriding.
    fn alignment_boundaries(
        &self,
        offset: u64,
        len: u64,
        cap: usize,
    ) -> Option<Result<boundaries::Boundaries, LayoutError>> {
        if self.stripe_unit() == 0 {
            return None;
        }
        Some(boundaries::read_plan_cuts(self, offset, len, cap))
    }

    /// Resync and scrub compare a sync group in a sync space where the bytes that depend on
    /// each other share offsets. A layout whose stripe units sit at different member offsets
    /// (raid5-tracks' per-member rows) maps it: member `member`'s pieces (member offset,
    /// length) of sync bytes `offset..offset+len`, in order. Default: the same bytes.
    fn sync_pieces(&self, _member: usize, offset: u64, len: u64) -> Vec<(u64, u64)> {
        vec![(offset, len)]
    }

    /// The sync space's size. Default: the member data bytes.
    fn sync_bytes(&self) -> u64 {
        self.member_data_bytes()
    }

    /// The sync bytes whose pieces hold every member's bytes `start..end` (a dirty region of
    /// the write-intent bitmap, in member offsets). Default: the same bytes.
    fn sync_range(&self, start: u64, end: u64) -> (u64, u64) {
        (start, end)
    }

    /// Refuse requests beyond the volume.
    fn check_range(&self, offset: u64, len: u64) -> Result<(), LayoutError> {
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.capacity())
        {
            return Err(LayoutError::OutOfRange {
                offset,
                len,
                size: self.capacity(),
            });
        }
        Ok(())
    }
}
