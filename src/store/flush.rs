//! Device flushes shared across journals: which device a journal lives on and whether every
//! fdatasync of it flushes that device's write cache, the write-out of a send's intent frame
//! (`sync_file_range`: on the device, not yet flushed), and the decision whether a recipient's
//! stated flush covers such a frame, so the sender need not fdatasync it on the send's path.
//!
//! Why a recipient's flush covers our frame: a cache FLUSH makes every write that *completed*
//! before it was *issued* durable (the block layer's REQ_PREFLUSH contract). Our frame's
//! write-out completes before the first byte of the send leaves; the recipient states only a
//! fdatasync that began after the request arrived, on an ext4 filesystem (not `data=journal`,
//! barriers on) whose fdatasync always issues a flush after it began: either its own
//! `blkdev_issue_flush` after the data write-out, or the commit record (REQ_PREFLUSH) of a
//! journal transaction that was not yet flushing when it looked. The same device (`st_dev`)
//! means the same block device, whose flush that was. See ARCHITECTURE.md ("The shared device
//! flush"); the measurements behind it are in docs/performance-log.md.

use crate::config::internal::MOUNTINFO_BYTES_MAX;
use std::fs::File;
use std::os::fd::AsRawFd;

/// `FS_JOURNAL_DATA_FL`: the inode's data goes through the journal (`chattr +j`).
const JOURNAL_DATA_FL: nix::libc::c_long = 0x4000;

/// A journal file's device and whether its fdatasync always flushes that device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Device {
    /// `st_dev` of the journal file.
    pub dev: u64,
    /// ext4, not `data=journal` (mount or inode), barriers on: every fdatasync issues a
    /// device flush after it began (see the module doc).
    pub flushes: bool,
}

impl Device {
    /// Reads the facts of `file` once, at open: every later journal generation is created in
    /// the same directory, so on the same filesystem and mount. Anything unreadable answers
    /// `flushes: false`.
    pub fn of(file: &File) -> Device {
        let Ok(st) = nix::sys::stat::fstat(file) else {
            return Device::default();
        };
        let dev = st.st_dev;
        let ext = nix::sys::statfs::fstatfs(file)
            .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::EXT4_SUPER_MAGIC);
        let flushes = ext
            && !inode_journals_data(file)
            && read_mountinfo().is_some_and(|m| {
                mount_flushes(&m, nix::sys::stat::major(dev), nix::sys::stat::minor(dev))
            });
        Device { dev, flushes }
    }
}

fn read_mountinfo() -> Option<String> {
    use std::io::Read;
    let mut s = String::new();
    File::open("/proc/self/mountinfo")
        .ok()?
        .take(MOUNTINFO_BYTES_MAX)
        .read_to_string(&mut s)
        .ok()?;
    Some(s)
}

/// Whether the inode journals its data (`chattr +j`); an unreadable flag counts as yes.
fn inode_journals_data(file: &File) -> bool {
    let mut flags: nix::libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes at most one `long` (the kernel writes an int) through
    // the pointer, which points at `flags`, alive for the call; the fd is open.
    let rc = unsafe {
        nix::libc::ioctl(
            file.as_raw_fd(),
            nix::libc::FS_IOC_GETFLAGS,
            &mut flags as *mut nix::libc::c_long,
        )
    };
    rc != 0 || flags & JOURNAL_DATA_FL != 0
}

/// Whether every mount of device `major:minor` in `mountinfo` is ext4 whose fdatasync flushes
/// the device: not `data=journal`, not `nobarrier`/`barrier=0`. No such mount: false.
pub fn mount_flushes(mountinfo: &str, major: u64, minor: u64) -> bool {
    let want = format!("{major}:{minor}");
    let mut seen = false;
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        if left.split_whitespace().nth(2) != Some(want.as_str()) {
            continue;
        }
        let mut r = right.split_whitespace();
        let (fstype, _source, opts) = (r.next(), r.next(), r.next().unwrap_or(""));
        let off = opts
            .split(',')
            .any(|o| matches!(o, "data=journal" | "nobarrier" | "barrier=0"));
        if fstype != Some("ext4") || off {
            return false;
        }
        seen = true;
    }
    seen
}

/// Writes `len` bytes of `file` from `off` out to the device and waits until those writes
/// completed (`sync_file_range` WAIT_BEFORE | WRITE | WAIT_AFTER). Not a flush: the bytes may
/// sit in the device's volatile cache until the next flush of that device.
pub fn write_out(file: &File, off: u64, len: u64) -> std::io::Result<()> {
    let flags = nix::libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | nix::libc::SYNC_FILE_RANGE_WRITE
        | nix::libc::SYNC_FILE_RANGE_WAIT_AFTER;
    let (Ok(off), Ok(len)) = (i64::try_from(off), i64::try_from(len)) else {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    };
    // SAFETY: a plain system call on an open fd with integer arguments; no memory is passed.
    let rc = unsafe { nix::libc::sync_file_range(file.as_raw_fd(), off, len, flags) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// What the store knows of a send's intent frame once it is written (our own evidence).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntentFrame {
    /// The frame, and every frame before it since the last fdatasync, lay wholly inside room
    /// whose size and blocks an earlier fdatasync made durable: its durability needs no
    /// metadata, only its data blocks.
    pub in_room: bool,
    /// Those bytes were written out to the device and the writes completed before the intent
    /// was answered (before any byte of the send could leave).
    pub written_out: bool,
}

/// How the recipient answered one delivery attempt this thread made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `accepted` by a write of this attempt, with the recipient's `flushedDevice` statement.
    Accepted(Option<u64>),
    /// Anything else: a refusal, an error, a receipt read from the stored state or answered
    /// by another attempt, a delivery to one of our own runs.
    Other,
}

/// Whether the recipient's stated flush made our intent durable, so the sender answers
/// `accepted` without its own fdatasync. Every condition must hold: our journal flushes its
/// device on fdatasync like the recipient's (`own.flushes`), the recipient stated a flush of
/// the very device our journal is on, the frame needed no metadata and was written out.
pub fn covered(own: Device, frame: IntentFrame, answer: Answer) -> bool {
    let Answer::Accepted(Some(stated)) = answer else {
        return false;
    };
    own.flushes && stated == own.dev && frame.in_room && frame.written_out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: Device = Device {
        dev: 0xFE00,
        flushes: true,
    };
    const GOOD: IntentFrame = IntentFrame {
        in_room: true,
        written_out: true,
    };

    #[test]
    fn a_stated_flush_of_our_device_covers_a_written_out_frame_in_room() {
        assert!(covered(OWN, GOOD, Answer::Accepted(Some(0xFE00))));
    }

    #[test]
    fn every_missing_condition_means_syncing_ourselves() {
        // No statement (an old recipient, a duplicate, an unqualified filesystem).
        assert!(!covered(OWN, GOOD, Answer::Accepted(None)));
        // Another device.
        assert!(!covered(OWN, GOOD, Answer::Accepted(Some(0xFE01))));
        // Our own journal's fdatasync would not flush (not ext4, data=journal, nobarrier).
        let weak = Device {
            flushes: false,
            ..OWN
        };
        assert!(!covered(weak, GOOD, Answer::Accepted(Some(0xFE00))));
        // Appended past the room: its size change is metadata no data flush carries.
        let past = IntentFrame {
            in_room: false,
            ..GOOD
        };
        assert!(!covered(OWN, past, Answer::Accepted(Some(0xFE00))));
        // Write-out failed or did not run.
        let unwritten = IntentFrame {
            written_out: false,
            ..GOOD
        };
        assert!(!covered(OWN, unwritten, Answer::Accepted(Some(0xFE00))));
        // Refused, failed, read from state, delivered in-process.
        assert!(!covered(OWN, GOOD, Answer::Other));
        assert!(!covered(OWN, IntentFrame::default(), Answer::Other));
    }

    const MOUNTS: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
28 27 254:0 /srv /mnt/srv rw,relatime - ext4 /dev/vda rw,discard
29 27 254:1 / /j rw - ext4 /dev/vdb rw,data=journal
30 27 254:2 / /nb rw - ext4 /dev/vdc rw,nobarrier
31 27 254:3 / /x rw - xfs /dev/vdd rw,attr2
32 27 254:4 / /b0 rw - ext4 /dev/vde rw,barrier=0
";

    #[test]
    fn only_ext4_mounts_that_flush_on_fdatasync_qualify() {
        assert!(mount_flushes(MOUNTS, 254, 0));
        assert!(!mount_flushes(MOUNTS, 254, 1), "data=journal");
        assert!(!mount_flushes(MOUNTS, 254, 2), "nobarrier");
        assert!(!mount_flushes(MOUNTS, 254, 3), "xfs");
        assert!(!mount_flushes(MOUNTS, 254, 4), "barrier=0");
        assert!(!mount_flushes(MOUNTS, 254, 9), "no such mount");
        assert!(!mount_flushes("garbage\n\n- -", 254, 0));
    }

    #[test]
    fn write_out_of_a_written_range_succeeds() {
        use std::os::unix::fs::FileExt;
        let dir = crate::fsutil::TempDir::new("flush-write-out").unwrap();
        let f = File::create(dir.join("f")).unwrap();
        f.write_all_at(&[7u8; 4096], 0).unwrap();
        write_out(&f, 0, 4096).unwrap();
    }
}
