//! Outputs that appear complete or not at all: everything is written into a temporary
//! file or folder next to the destination and renamed into place at the end. An error
//! or an interrupted run leaves the destination as it was: the temporary is removed on
//! error and on Ctrl-C / SIGTERM (`interrupt`); only a process killed outright (SIGKILL,
//! power loss) may leave a hidden `.blockscale-*` temporary behind, never a half-written
//! destination.

use std::path::{Path, PathBuf};

use tempfile::{NamedTempFile, TempDir};

use crate::CheckpointError;
use crate::interrupt::Registration;

/// Refuses an output that is the input (the same file or folder, however named).
///
/// # Errors
/// [`CheckpointError::Invalid`].
pub fn same_path_check(input: &Path, output: &Path) -> Result<(), CheckpointError> {
    let canon = |p: &Path| std::fs::canonicalize(p).ok();
    if canon(input).is_some() && canon(input) == canon(output) {
        return Err(CheckpointError::Invalid(format!("the output {} is the input; write elsewhere", output.display())));
    }
    Ok(())
}

/// Whether the output is one file or a folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputKind {
    /// One safetensors file.
    File,
    /// A checkpoint folder.
    Dir,
}

enum Temp {
    File(NamedTempFile),
    Dir(TempDir),
}

/// A destination being written.
pub struct Output {
    dest: PathBuf,
    force: bool,
    temp: Temp,
    /// Removes the temporary on Ctrl-C / SIGTERM until the output is committed or dropped.
    _interrupt: Registration,
}

impl Output {
    /// Refuses an existing `dest` without `force`: what [`Output::create`] checks first,
    /// for a command that wants to say so before other checks of its own.
    ///
    /// # Errors
    /// [`CheckpointError::OutputExists`].
    pub fn refuse_existing(dest: &Path, force: bool) -> Result<(), CheckpointError> {
        if dest.exists() && !force {
            return Err(CheckpointError::OutputExists { path: dest.to_owned() });
        }
        Ok(())
    }

    /// Prepares `dest`: refuses an existing destination without `force` (before any
    /// work is done) and creates the temporary next to it.
    ///
    /// # Errors
    /// [`CheckpointError::OutputExists`], or [`CheckpointError::Write`] when the temporary cannot be
    /// created (missing parent folder, permissions).
    pub fn create(dest: &Path, kind: OutputKind, force: bool) -> Result<Self, CheckpointError> {
        Self::refuse_existing(dest, force)?;
        if dest.is_dir() != (kind == OutputKind::Dir) && dest.exists() {
            let what = if kind == OutputKind::Dir { "a folder" } else { "a file" };
            return Err(CheckpointError::Invalid(format!(
                "{} exists and is not {what}; the output of this input must be {what}",
                dest.display()
            )));
        }
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => PathBuf::from("."),
        };
        let write_err = |source| CheckpointError::Write { path: dest.to_owned(), source };
        let mut b = tempfile::Builder::new();
        // Readable by others like any file the user writes (tempfile's default is private).
        let mode = if kind == OutputKind::Dir { 0o755 } else { 0o644 };
        b.prefix(".blockscale-").suffix(".tmp").permissions(std::os::unix::fs::PermissionsExt::from_mode(mode));
        let temp = match kind {
            OutputKind::File => Temp::File(b.tempfile_in(&parent).map_err(write_err)?),
            OutputKind::Dir => Temp::Dir(b.tempdir_in(&parent).map_err(write_err)?),
        };
        let temp_path = match &temp {
            Temp::File(f) => f.path().to_owned(),
            Temp::Dir(d) => d.path().to_owned(),
        };
        Ok(Self { dest: dest.to_owned(), force, temp, _interrupt: Registration::new(&temp_path, dest) })
    }

    /// Where to write: the temporary file, or a path inside the temporary folder.
    pub fn path(&self, name_in_dir: Option<&str>) -> PathBuf {
        match (&self.temp, name_in_dir) {
            (Temp::File(f), _) => f.path().to_owned(),
            (Temp::Dir(d), Some(n)) => d.path().join(n),
            (Temp::Dir(d), None) => d.path().to_owned(),
        }
    }

    /// Renames the temporary into place. With `force`, an existing destination is
    /// replaced (a folder is moved aside first and removed once the new one is in place).
    ///
    /// # Errors
    /// [`CheckpointError::OutputExists`] if the destination appeared meanwhile without
    /// `force`, [`CheckpointError::Write`] if a rename fails (the temporary is then removed).
    pub fn commit(self) -> Result<(), CheckpointError> {
        let dest = self.dest;
        let write_err = |source| CheckpointError::Write { path: dest.clone(), source };
        if dest.exists() && !self.force {
            return Err(CheckpointError::OutputExists { path: dest });
        }
        match self.temp {
            Temp::File(f) => {
                if dest.is_dir() {
                    return Err(CheckpointError::Invalid(format!("{} is a folder; expected a file", dest.display())));
                }
                f.persist(&dest).map_err(|e| write_err(e.error))?;
            }
            Temp::Dir(d) => {
                let aside = if dest.exists() {
                    let parent = d.path().parent().map(Path::to_owned).unwrap_or_else(|| PathBuf::from("."));
                    let old =
                        tempfile::Builder::new().prefix(".blockscale-old-").tempdir_in(&parent).map_err(write_err)?;
                    let old_path = old.path().join("replaced");
                    std::fs::rename(&dest, &old_path).map_err(write_err)?;
                    Some(old)
                } else {
                    None
                };
                let temp_path = d.keep();
                if let Err(e) = std::fs::rename(&temp_path, &dest) {
                    let _ = std::fs::remove_dir_all(&temp_path);
                    if let Some(old) = &aside {
                        // Put the previous output back where it was.
                        let _ = std::fs::rename(old.path().join("replaced"), &dest);
                    }
                    return Err(write_err(e));
                }
                // Dropping `aside` removes the replaced output.
                drop(aside);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_input_under_another_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("m.safetensors");
        std::fs::write(&f, b"").unwrap();
        let e = same_path_check(&f, &dir.path().join(".").join("m.safetensors")).unwrap_err();
        assert!(matches!(e, CheckpointError::Invalid(_)), "{e:?}");
        assert!(e.to_string().ends_with("is the input; write elsewhere"), "{e}");
        assert!(same_path_check(&f, &dir.path().join("other.safetensors")).is_ok());
        // A missing input is for the reader to report, not this check.
        let missing = dir.path().join("missing");
        assert!(same_path_check(&missing, &missing).is_ok());
    }
}
