//! The fdatasync floor taken between a phase's own samples: one record written in place into
//! preallocated room and fdatasynced right after each measured send, so that a latency figure
//! and its floor see the same device in the same seconds. On these shared virtual machines the
//! device's fdatasync drifts by half within minutes (one run: 150 µs before its phases, 103 µs
//! after), and a floor taken only before and after judges the figure by a device it never met.
//! It is also the fdatasync a send makes: a lone one after other work, not one of a tight loop,
//! which this virtual device answers faster (a 4 KiB write in place + fdatasync: 137–159 µs
//! median back to back, 171–195 µs after a 150–300 µs pause, same file, same minute). The
//! report shows the ratio to the floors before and after beside it.

use super::floors::{RECORD_BYTES, io, micros, zero_filled};
use super::stats::Summary;
use crate::error::Result;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// In-place fdatasync samples, one per call to [`sample`](Self::sample).
pub struct PairedSync {
    file: File,
    path: PathBuf,
    records: usize,
    samples: Vec<f64>,
}

impl PairedSync {
    /// A preallocated file under `dir` with room for `n` records (reused in turn beyond that).
    pub fn start(dir: &Path, n: usize) -> Result<PairedSync> {
        let path = dir.join("floor-paired.log");
        let records = n.max(1);
        let file = match zero_filled(&path, records * RECORD_BYTES) {
            Ok(f) => f,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        Ok(PairedSync {
            file,
            path,
            records,
            samples: Vec::with_capacity(n),
        })
    }

    /// One record written in place and fdatasynced, timed.
    pub fn sample(&mut self) -> Result<()> {
        let at = (self.samples.len() % self.records) * RECORD_BYTES;
        let record = [0x5au8; RECORD_BYTES];
        let t = Instant::now();
        self.file
            .write_all_at(&record, at as u64)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| io("write in place + fdatasync between sends", e))?;
        self.samples.push(micros(t));
        Ok(())
    }

    /// The samples taken; the file is removed.
    pub fn finish(mut self) -> Vec<f64> {
        std::mem::take(&mut self.samples)
    }
}

impl Drop for PairedSync {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The paired floor's median, or `fallback` (the floors before and after) when a phase took
/// no paired samples.
pub fn median_or(samples: &[f64], fallback: f64) -> f64 {
    if samples.is_empty() {
        fallback
    } else {
        Summary::of(samples).median
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sample_is_one_timed_sync_and_the_file_goes_with_it() {
        let dir = crate::fsutil::TempDir::new("paired").unwrap();
        let mut p = PairedSync::start(&dir, 2).unwrap();
        let path = dir.join("floor-paired.log");
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            2 * RECORD_BYTES as u64
        );
        for _ in 0..3 {
            p.sample().unwrap();
        }
        // Room for two records: the third reuses the first, the file does not grow.
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            2 * RECORD_BYTES as u64
        );
        let s = p.finish();
        assert_eq!(s.len(), 3);
        assert!(s.iter().all(|us| *us > 0.0));
        assert!(!path.exists(), "the floor file is removed");
        assert_eq!(median_or(&[], 7.0), 7.0);
        assert_eq!(median_or(&[3.0, 1.0, 2.0], 7.0), 2.0);
    }
}
