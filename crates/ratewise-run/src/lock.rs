//! One run per store: a lock file beside the db, held for the run's life.
//!
//! The lock is the operating system's (`flock` on Unix, through
//! [`File::try_lock`]): it goes with the process however it ends, so a run
//! killed with `kill -9` leaves no stale lock. The file names its holder
//! (process id and start time) for the message a second run prints.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The held lock; dropping it releases it.
#[derive(Debug)]
pub struct DbLock {
    _file: File,
    path: PathBuf,
}

impl DbLock {
    /// Where the lock lives.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Why the lock was not taken.
#[derive(Debug)]
pub enum LockError {
    /// Another run holds it; what its file says of the holder.
    Held(String),
    /// The lock file could not be opened.
    Io(std::io::Error),
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Held(holder) => write!(f, "held by another run ({holder})"),
            LockError::Io(e) => write!(f, "cannot open the lock file: {e}"),
        }
    }
}

/// The lock file of the store at `db`: `<db>.lock`.
pub fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Takes the lock of the store at `db`, or says who holds it.
pub fn lock(db: &Path) -> Result<DbLock, LockError> {
    let path = lock_path(db);
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(LockError::Io)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(LockError::Held(if holder.is_empty() {
                "holder unknown".into()
            } else {
                holder.chars().take(200).collect()
            }));
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(LockError::Io(e)),
    }
    let since = httpdate::fmt_http_date(std::time::SystemTime::now());
    let _ = file.set_len(0);
    let _ = file.seek(SeekFrom::Start(0));
    let _ = write!(file, "pid {} since {since}", std::process::id());
    let _ = file.flush();
    Ok(DbLock { _file: file, path })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_second_lock_names_the_first_holder() {
        let dir = std::env::temp_dir().join(format!("rw-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("x.db");
        let first = super::lock(&db).unwrap();
        match super::lock(&db) {
            Err(super::LockError::Held(h)) => {
                assert!(h.contains(&format!("pid {}", std::process::id())), "{h}")
            }
            other => panic!("{other:?}"),
        }
        drop(first);
        assert!(super::lock(&db).is_ok());
        let _ = std::fs::remove_dir_all(dir);
    }
}
