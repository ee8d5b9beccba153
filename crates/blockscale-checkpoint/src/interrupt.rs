//! Ctrl-C and SIGTERM while an output is being written: once [`install`]ed, every
//! unfinished temporary is removed and the process exits with [`INTERRUPTED`] (130),
//! saying what it removed. (The temporaries' own cleanup runs on drop, which an exit by
//! signal never reaches: a hidden `.blockscale-*.tmp` of hundreds of MB stayed behind.)

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The exit code of an interrupted process: 128 + SIGINT, as shells report it.
pub const INTERRUPTED: u8 = 130;

/// `(temporary, destination)` of every output being written.
static PENDING: Mutex<Vec<(PathBuf, PathBuf)>> = Mutex::new(Vec::new());

fn pending_list() -> std::sync::MutexGuard<'static, Vec<(PathBuf, PathBuf)>> {
    // A panic while holding the lock leaves a list that is still right.
    PENDING.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Installs the handler for SIGINT, SIGTERM and SIGHUP: a command-line tool's choice,
/// which a library never makes for its caller. Without it (an embedder with its own
/// handler), an interrupted run may leave its temporary behind; [`pending`] lists them.
pub fn install() {
    if let Err(e) = ctrlc::set_handler(on_signal) {
        eprintln!("warning: no interrupt handler ({e}): an interrupted run may leave a .blockscale-*.tmp behind");
    }
}

fn on_signal() {
    let list = pending_list();
    for (temp, dest) in list.iter() {
        match remove(temp) {
            Ok(()) => eprintln!(
                "interrupted: removed the unfinished output {}; {} was not written",
                temp.display(),
                dest.display()
            ),
            Err(e) => eprintln!("interrupted: could not remove the unfinished output {}: {e}", temp.display()),
        }
    }
    if list.is_empty() {
        eprintln!("interrupted");
    }
    std::process::exit(i32::from(INTERRUPTED));
}

/// The unfinished outputs being written now, as `(temporary, destination)`: what an
/// embedder's own interrupt handler should remove.
pub fn pending() -> Vec<(PathBuf, PathBuf)> {
    pending_list().clone()
}

/// Removes a temporary file or folder; a folder the writer is still adding to is tried
/// again, and one that is already gone is fine.
fn remove(path: &Path) -> std::io::Result<()> {
    let mut result = Ok(());
    for _ in 0..5 {
        result = if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
        match &result {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
    result
}

/// An output's temporary, known to the handler until this is dropped.
pub struct Registration {
    temp: PathBuf,
}

impl Registration {
    /// Registers `temp`, the unfinished form of `dest`.
    pub fn new(temp: &Path, dest: &Path) -> Self {
        pending_list().push((temp.to_owned(), dest.to_owned()));
        Self { temp: temp.to_owned() }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        pending_list().retain(|(t, _)| t != &self.temp);
    }
}
