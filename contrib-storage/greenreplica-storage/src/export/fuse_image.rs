//! The volume as a single-file FUSE filesystem: the mount point is a regular file whose
//! bytes are the volume's. A loop device is attached to it.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, INodeNo,
    InitFlags, KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::layout::LayoutError;
use crate::volume::{Volume, VolumeError};

const TTL: Duration = Duration::from_secs(3600);
/// Large FUSE requests keep sequential throughput close to the members'.
const MAX_WRITE: u32 = 1 << 20;

pub struct ImageFs {
    volume: Arc<Volume>,
    created: SystemTime,
}

impl ImageFs {
    pub fn new(volume: Arc<Volume>) -> Self {
        Self {
            volume,
            created: SystemTime::now(),
        }
    }

    fn attr(&self) -> FileAttr {
        let size = self.volume.capacity();
        FileAttr {
            ino: INodeNo::ROOT,
            size,
            blocks: size.div_ceil(512),
            atime: self.created,
            mtime: self.created,
            ctime: self.created,
            crtime: self.created,
            kind: FileType::RegularFile,
            perm: 0o600,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

fn errno(e: &VolumeError) -> Errno {
    match e {
        VolumeError::Layout(LayoutError::OutOfRange { .. }) => Errno::EFBIG,
        _ => Errno::EIO,
    }
}

impl Filesystem for ImageFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if let Err(max) = config.set_max_write(MAX_WRITE) {
            let _ = config.set_max_write(max);
        }
        // The loop device uses direct I/O on the image; let the kernel split and send a
        // large request's pieces concurrently.
        let _ = config.add_capabilities(InitFlags::FUSE_ASYNC_DIO);
        Ok(())
    }

    fn lookup(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEntry) {
        reply.error(Errno::ENOENT);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino == INodeNo::ROOT {
            reply.attr(&TTL, &self.attr());
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    // The image has a fixed size; ownership, mode and time changes are accepted and ignored.
    fn setattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        reply.attr(&TTL, &self.attr());
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE);
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let end = (offset + u64::from(size)).min(self.volume.capacity());
        if offset >= end {
            reply.data(&[]);
            return;
        }
        let mut buf = vec![0u8; (end - offset) as usize];
        match self.volume.read(offset, &mut buf) {
            Ok(()) => reply.data(&buf),
            Err(e) => {
                tracing::error!(volume = %self.volume.name(), offset, size, error = %e, "read failed");
                reply.error(errno(&e));
            }
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.volume.write(offset, data) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => {
                tracing::error!(volume = %self.volume.name(), offset, len = data.len(), error = %e, "write failed");
                reply.error(errno(&e));
            }
        }
    }

    // No extended attributes; answering here keeps the kernel's probes out of the logs.
    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::ENODATA);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        if size == 0 {
            reply.size(0);
        } else {
            reply.data(&[]);
        }
    }

    /// Discards from the loop device arrive as hole punches; members are not sparse-aware
    /// yet, so the loop driver is told the operation is unsupported.
    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EOPNOTSUPP);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    /// The loop driver turns the filesystem's flushes and FUA writes into fsync here.
    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.volume.flush() {
            Ok(()) => reply.ok(),
            Err(e) => {
                tracing::error!(volume = %self.volume.name(), error = %e, "fsync failed");
                reply.error(Errno::EIO);
            }
        }
    }
}
