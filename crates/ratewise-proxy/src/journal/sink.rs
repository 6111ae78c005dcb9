//! Where the journal's bytes go. Only the writer
//! (`journal::writer`) calls it, from its own thread: one append
//! per group of lines, and a compaction between groups. A trait so that a
//! test can put the journal on a slow or failing disk and count its
//! writes; the proxy's is [`FileSink`].

use std::io::Write;
use std::path::{Path, PathBuf};

/// The journal's storage.
pub(crate) trait Sink: Send + 'static {
    /// Appends one group of whole lines in one write, handed to the
    /// operating system (it survives the process being killed). An error
    /// says the group may not be on disk (part of it may be).
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()>;

    /// Replaces the journal with `text` (a compaction), durably and at
    /// once: a crash leaves the old journal or the new one, whole. The
    /// appends after it go to the new one. An error leaves the old one
    /// appended to.
    fn replace(&mut self, text: &[u8]) -> std::io::Result<()>;

    /// Makes what was appended durable (an fsync, on shutdown).
    fn sync(&mut self) -> std::io::Result<()>;
}

/// The journal file, appended to.
#[derive(Debug)]
pub(crate) struct FileSink {
    path: PathBuf,
    file: std::fs::File,
}

/// Where compaction writes the new journal before renaming it over.
pub(crate) fn compact_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".compact");
    PathBuf::from(p)
}

impl FileSink {
    /// The journal at `path`, whose appends go to `file` (opened to
    /// append).
    pub(crate) fn new(path: &Path, file: std::fs::File) -> FileSink {
        FileSink {
            path: path.to_owned(),
            file,
        }
    }
}

impl Sink for FileSink {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.write_all(bytes)?;
        self.file.flush()
    }

    /// Writes `text` to `FILE.compact`, fsyncs it, renames it over the
    /// journal and fsyncs the directory; the new file's handle (opened
    /// before the rename) takes the appends after it.
    fn replace(&mut self, text: &[u8]) -> std::io::Result<()> {
        let tmp = compact_path(&self.path);
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let written = (|| {
            let mut f = std::fs::OpenOptions::new()
                .create_new(true)
                .append(true)
                .read(true)
                .open(&tmp)?;
            // The journal's own permissions.
            if let Ok(m) = self.file.metadata() {
                let _ = f.set_permissions(m.permissions());
            }
            f.write_all(text)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            Ok::<_, std::io::Error>(f)
        })();
        let f = match written {
            Ok(f) => f,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        // The rename itself made durable (the journal's directory).
        #[cfg(unix)]
        if let Some(dir) = self.path.parent() {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        self.file = f;
        Ok(())
    }

    fn sync(&mut self) -> std::io::Result<()> {
        self.file.sync_all()
    }
}
