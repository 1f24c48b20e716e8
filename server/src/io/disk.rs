//! The real filesystem, one blocking call per operation, off the reactor.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use super::off_reactor;
use crate::env::{Disk, DiskLock, LocalBoxFuture};

pub struct RealDisk;

fn owned(path: &Path) -> PathBuf {
    path.to_path_buf()
}

/// The mode of every file Warden creates: the owner's alone. Journals and inputs hold every
/// principal's arguments and results, and the request-state key seals their waiting runs; a
/// mode given at creation is narrowed by the umask, never widened, so it holds whatever the
/// umask.
const FILE_MODE: u32 = 0o600;
/// The mode of every directory Warden creates.
const DIR_MODE: u32 = 0o700;

/// Options that create a file with `FILE_MODE`.
fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(FILE_MODE);
    options
}

impl Disk for RealDisk {
    fn read(&self, path: &Path) -> LocalBoxFuture<'static, io::Result<Vec<u8>>> {
        let path = owned(path);
        Box::pin(off_reactor(move || fs::read(path)))
    }

    fn append(&self, path: &Path, bytes: Vec<u8>) -> LocalBoxFuture<'static, io::Result<()>> {
        let path = owned(path);
        Box::pin(off_reactor(move || {
            let mut file = options().create(true).append(true).open(path)?;
            file.write_all(&bytes)
        }))
    }

    fn write(&self, path: &Path, bytes: Vec<u8>) -> LocalBoxFuture<'static, io::Result<()>> {
        let path = owned(path);
        Box::pin(off_reactor(move || {
            let mut file = options().create(true).write(true).truncate(true).open(path)?;
            file.write_all(&bytes)
        }))
    }

    fn fsync(&self, path: &Path) -> LocalBoxFuture<'static, io::Result<()>> {
        let path = owned(path);
        // fsync flushes the inode's dirty data whichever descriptor wrote it.
        Box::pin(off_reactor(move || OpenOptions::new().read(true).open(path)?.sync_all()))
    }

    fn fsync_dir(&self, dir: &Path) -> LocalBoxFuture<'static, io::Result<()>> {
        let dir = owned(dir);
        Box::pin(off_reactor(move || File::open(dir)?.sync_all()))
    }

    fn write_new_durably(&self, path: &Path, bytes: Vec<u8>) -> LocalBoxFuture<'static, io::Result<()>> {
        let path = owned(path);
        Box::pin(off_reactor(move || {
            let mut file = options().create(true).write(true).truncate(true).open(&path)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            File::open(crate::base::layout::folder_of(&path))?.sync_all()
        }))
    }

    fn append_durably(&self, path: &Path, bytes: Vec<u8>) -> LocalBoxFuture<'static, io::Result<()>> {
        let path = owned(path);
        Box::pin(off_reactor(move || {
            let mut file = options().create(true).append(true).open(path)?;
            file.write_all(&bytes)?;
            file.sync_all()
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> LocalBoxFuture<'static, io::Result<()>> {
        let (from, to) = (owned(from), owned(to));
        Box::pin(off_reactor(move || fs::rename(from, to)))
    }

    fn remove(&self, path: &Path) -> LocalBoxFuture<'static, io::Result<()>> {
        let path = owned(path);
        Box::pin(off_reactor(move || fs::remove_file(path)))
    }

    fn create_dir_all(&self, dir: &Path) -> LocalBoxFuture<'static, io::Result<()>> {
        let dir = owned(dir);
        Box::pin(off_reactor(move || fs::DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)))
    }

    fn list(&self, dir: &Path) -> LocalBoxFuture<'static, io::Result<Vec<String>>> {
        let dir = owned(dir);
        Box::pin(off_reactor(move || {
            let mut names = Vec::new();
            for entry in fs::read_dir(dir)? {
                names.push(entry?.file_name().to_string_lossy().into_owned());
            }
            names.sort();
            Ok(names)
        }))
    }

    fn exists(&self, path: &Path) -> LocalBoxFuture<'static, io::Result<bool>> {
        let path = owned(path);
        Box::pin(off_reactor(move || path.try_exists()))
    }

    fn try_lock(&self, path: &Path) -> LocalBoxFuture<'static, io::Result<Option<DiskLock>>> {
        let path = owned(path);
        Box::pin(off_reactor(move || {
            let file = options().create(true).truncate(false).write(true).open(path)?;
            // SAFETY: flock on a descriptor this function owns; no memory is shared.
            let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if locked == 0 {
                return Ok(Some(DiskLock::new(Box::new(file))));
            }
            let error = io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
                Ok(None)
            } else {
                Err(error)
            }
        }))
    }
}
