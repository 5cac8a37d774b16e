//! `hipfs serve` as a child process of a test: started on a port the OS
//! chooses (or a given one, to restart on the same address), its bound
//! address read from the line it prints, its stderr kept in a file and
//! printed when the test fails.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The `hipfs` binary of this build.
pub fn hipfs_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hipfs"))
}

/// A running `hipfs serve` (derefs to its [`Child`]).
pub struct ServerProcess {
    child: Child,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    log: PathBuf,
    _log_dir: tempfile::TempDir,
}

impl std::ops::Deref for ServerProcess {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.child
    }
}

impl std::ops::DerefMut for ServerProcess {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl ServerProcess {
    /// What the server wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // A server left running holds its port, threads and an inotify
        // instance (128 per user) past the test.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- stderr of hipfs serve on port {} ---\n{}--- end ---",
                self.port,
                self.log()
            );
        }
    }
}

/// `hipfs serve DIR --listen 127.0.0.1:PORT EXTRA...` (PORT 0: the OS
/// chooses); returns once the server says it accepts connections.
pub fn spawn_server(dir: &Path, port: u16, extra: &[&str]) -> ServerProcess {
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("serve.stderr");
    let mut child = Command::new(hipfs_bin())
        .arg("serve")
        .arg(dir)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    // Reads the ready line, then keeps draining stdout so the server never
    // blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if !sent {
                if let Some(addr) = line.strip_prefix("hipfs serve: listening on ") {
                    let _ = tx.send(addr.to_string());
                    sent = true;
                }
            }
        }
    });
    let addr = match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(a) => a,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "hipfs serve did not report its address; stderr:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
    };
    let port = addr
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("unreadable address {addr:?}"));
    ServerProcess {
        child,
        port,
        log,
        _log_dir: log_dir,
    }
}
