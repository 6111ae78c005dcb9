//! The admin token: read from its file, or generated into it at first
//! start, readable only by its user (mode 0600; its directory, when made
//! here, 0700). A file others can read is refused, as ssh refuses a key:
//! anyone who reads it can stop every key.

use std::io::{self, Read, Write};
use std::path::Path;

/// Why the token could not be had.
#[derive(Debug)]
#[non_exhaustive]
pub enum TokenError {
    /// The file could not be read, created or written.
    Io(io::Error),
    /// The file is readable or writable by others than its user.
    Permissions(u32),
    /// The file does not hold a usable token.
    Malformed(&'static str),
}

impl std::fmt::Display for TokenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenError::Io(e) => write!(f, "{e}"),
            TokenError::Permissions(mode) => write!(
                f,
                "mode {mode:o}: others than its user may read it (chmod 600 it)"
            ),
            // The content is never quoted.
            TokenError::Malformed(why) => write!(f, "its token {why}"),
        }
    }
}

impl std::error::Error for TokenError {}

/// A new token: 32 random bytes from the operating system, as 64 hex
/// digits.
pub fn generate() -> Result<String, TokenError> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| TokenError::Io(io::Error::other("no randomness from the system")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The token in `path`, generated into it when the file does not exist;
/// `true` when it was generated now.
pub fn load_or_create(path: &Path) -> Result<(String, bool), TokenError> {
    match read(path) {
        Err(TokenError::Io(e)) if e.kind() == io::ErrorKind::NotFound => {}
        other => return other.map(|t| (t, false)),
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.create(dir).map_err(TokenError::Io)?;
    }
    let token = generate()?;
    // Written whole under a name of this process's own, then linked into
    // place: another process starting at the same moment either finds no
    // file or the whole token, never an empty one.
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let written = o.open(&tmp).and_then(|mut f| {
        f.write_all(format!("{token}\n").as_bytes())?;
        f.sync_all()
    });
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok((token, true)),
        // Another process made it first: its token it is.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => read(path).map(|t| (t, false)),
        Err(e) => Err(TokenError::Io(e)),
    }
}

fn read(path: &Path) -> Result<String, TokenError> {
    let f = std::fs::File::open(path).map_err(TokenError::Io)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = f.metadata().map_err(TokenError::Io)?.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(TokenError::Permissions(mode & 0o777));
        }
    }
    let mut text = String::new();
    // A token is at most 512 characters: a larger file is not one.
    f.take(4096)
        .read_to_string(&mut text)
        .map_err(|_| TokenError::Malformed("is not text"))?;
    let token = text.trim().to_owned();
    super::settings::check_token(&token).map_err(TokenError::Malformed)?;
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("ratewise-token-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_token_is_generated_once_and_read_back() {
        let d = dir("once");
        let path = d.join("sub").join("admin-token");
        let (t, made) = load_or_create(&path).unwrap();
        assert!(made && t.len() == 64);
        let (again, made) = load_or_create(&path).unwrap();
        assert!(!made);
        assert_eq!(again, t);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
            let dmode = std::fs::metadata(path.parent().unwrap())
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(dmode & 0o777, 0o700);
        }
        let _ = std::fs::remove_dir_all(d);
    }

    #[cfg(unix)]
    #[test]
    fn a_file_others_can_read_is_refused_without_quoting_it() {
        use std::os::unix::fs::PermissionsExt;
        let d = dir("open");
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("admin-token");
        std::fs::write(&path, "a-token-others-can-read\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load_or_create(&path).unwrap_err();
        assert!(matches!(e, TokenError::Permissions(0o644)), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(load_or_create(&path).unwrap().0, "a-token-others-can-read");
        std::fs::write(&path, "short\n").unwrap();
        let e = load_or_create(&path).unwrap_err();
        assert!(!e.to_string().contains("short"), "{e}");
        let _ = std::fs::remove_dir_all(d);
    }
}
