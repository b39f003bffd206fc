//! The user's live jobs, wherever they were started: each job's socket lives in one private
//! per-user folder (`$XDG_RUNTIME_DIR/dpt-tui/`, else `/tmp/dpt-tui-<uid>/`), beside a
//! `<name>.json` copy of its [`ServerInfo`] naming its absolute run directory. `ls` and a bare
//! `attach` read that folder; nothing is removed by reading it. A job that died leaves a socket
//! nobody answers: the next job start, or `dpt-tui ls --prune`, removes it.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How to reach a running job: written to `server.json` in its run directory and to the
/// registry folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    pub pid: u32,
    pub socket: PathBuf,
    pub version: u32,
    /// The run directory, absolute.
    #[serde(default)]
    pub run_dir: PathBuf,
    /// When the job started serving, seconds since the Unix epoch.
    #[serde(default)]
    pub started_unix: f64,
}

impl ServerInfo {
    /// Whether the job answers on its socket.
    pub fn answers(&self) -> bool {
        UnixStream::connect(&self.socket).is_ok()
    }

    /// The registry entry beside the socket.
    pub fn entry_path(&self) -> PathBuf {
        self.socket.with_extension("json")
    }
}

/// This process's effective user id.
pub fn my_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The per-user folder, created 0700 and refused if someone else owns it or others may enter
/// it. Short, because a socket path may not exceed about 100 bytes.
pub fn socket_dir() -> std::io::Result<PathBuf> {
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|d| d.is_dir()) {
        Some(d) => d.join("dpt-tui"),
        None => PathBuf::from(format!("/tmp/dpt-tui-{}", my_uid())),
    };
    if !dir.exists() {
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let meta = std::fs::metadata(&dir)?;
    if meta.uid() != my_uid() || meta.mode() & 0o077 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a private folder of this user (owner {}, mode {:o})",
                dir.display(),
                meta.uid(),
                meta.mode() & 0o777
            ),
        ));
    }
    Ok(dir)
}

/// The socket's file name for a run directory: short and stable.
pub fn socket_name(run_dir: &Path) -> String {
    let canonical = run_dir.canonicalize().unwrap_or_else(|_| run_dir.to_owned());
    // FNV-1a over the path's bytes.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canonical.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}.sock")
}

/// Every job entry in the registry, answering or not, newest first. Reads only.
pub fn entries() -> Vec<ServerInfo> {
    let Ok(dir) = socket_dir() else { return Vec::new() };
    let mut out: Vec<ServerInfo> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .filter_map(|p| std::fs::read_to_string(p).ok())
                .filter_map(|t| serde_json::from_str::<ServerInfo>(&t).ok())
                .collect()
        })
        .unwrap_or_default();
    out.sort_by(|a, b| b.started_unix.total_cmp(&a.started_unix));
    out
}

/// The user's jobs that answer, newest first.
pub fn live_jobs() -> Vec<ServerInfo> {
    entries().into_iter().filter(ServerInfo::answers).collect()
}

/// Removes what dead jobs left: sockets nobody answers, their entries, and the `server.json`
/// of their run directories when it still names them. Returns the run directories cleaned.
pub fn prune() -> std::io::Result<Vec<PathBuf>> {
    let dir = socket_dir()?;
    let mut cleaned = Vec::new();
    for entry in std::fs::read_dir(&dir)?.flatten() {
        let path = entry.path();
        match path.extension().and_then(|x| x.to_str()) {
            Some("json") => {
                let info = std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|t| serde_json::from_str::<ServerInfo>(&t).ok());
                match info {
                    Some(info) if info.answers() => {}
                    Some(info) => {
                        let _ = std::fs::remove_file(&info.socket);
                        let _ = std::fs::remove_file(&path);
                        let server_file = info.run_dir.join(super::server::SERVER_FILE);
                        if super::client::server_info(&info.run_dir).is_some_and(|s| s.socket == info.socket)
                        {
                            let _ = std::fs::remove_file(server_file);
                        }
                        cleaned.push(info.run_dir);
                    }
                    // Not ours to judge: a file of another version or a torn write.
                    None => {}
                }
            }
            Some("sock") if !path.with_extension("json").exists() && UnixStream::connect(&path).is_err() => {
                let _ = std::fs::remove_file(&path);
            }
            _ => {}
        }
    }
    Ok(cleaned)
}
