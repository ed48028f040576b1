//! A PostgreSQL server this process starts and stops itself: Debian's
//! binaries (`/usr/lib/postgresql/*/bin`), a temporary data directory, a
//! free loopback port, run as the unprivileged `postgres` user when this
//! process is root (the server refuses root). For the store benchmark
//! (which may skip, saying why, when there are no binaries) and for tests
//! that must stop and restart the server. Stopped on drop.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// A running server.
pub struct PgServer {
    bin: PathBuf,
    data: PathBuf,
    dir: PathBuf,
    port: u16,
    as_postgres: bool,
    /// More `-c name=value` settings for every start.
    settings: String,
}

/// The newest installed server's binary directory.
pub fn bindir() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("initdb").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl PgServer {
    /// Starts a server.
    ///
    /// # Errors
    ///
    /// No binaries, or `initdb` / `pg_ctl start` failed (their output).
    pub fn start() -> Result<PgServer, String> {
        PgServer::start_with(&[])
    }

    /// Starts a server with more settings (`("fsync", "off")`), kept for
    /// its restarts.
    ///
    /// # Errors
    ///
    /// No binaries, or `initdb` / `pg_ctl start` failed (their output).
    pub fn start_with(settings: &[(&str, &str)]) -> Result<PgServer, String> {
        let bin = bindir()
            .ok_or("no PostgreSQL server binaries under /usr/lib/postgresql (apt-get install postgresql)")?;
        let n = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("subtask-pgserver-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let as_postgres = is_root();
        if as_postgres {
            let ok = Command::new("chown")
                .args(["postgres:postgres", &dir.to_string_lossy()])
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                return Err(format!("chown postgres {}", dir.display()));
            }
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let server = PgServer {
            data: dir.join("data"),
            bin,
            dir,
            port,
            as_postgres,
            settings: settings.iter().map(|(k, v)| format!(" -c {k}={v}")).collect(),
        };
        server.run(
            "initdb",
            &[
                "-D",
                &server.data.to_string_lossy(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
            ],
        )?;
        server.pg_ctl_start()?;
        Ok(server)
    }

    fn run(&self, tool: &str, args: &[&str]) -> Result<(), String> {
        let exe = self.bin.join(tool);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let out = cmd.args(args).output().map_err(|e| format!("{tool}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{tool} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    fn pg_ctl_start(&self) -> Result<(), String> {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200{}",
            self.port,
            self.dir.display(),
            self.settings
        );
        let log = self.dir.join("server.log");
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data.to_string_lossy(),
                "-l",
                &log.to_string_lossy(),
                "-w",
                "-t",
                "60",
                "-o",
                &opts,
                "start",
            ],
        )
    }

    /// Stops the server at once (`-m immediate`: as a crash would).
    ///
    /// # Errors
    ///
    /// `pg_ctl` failed.
    pub fn stop(&self) -> Result<(), String> {
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data.to_string_lossy(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        )
    }

    /// Starts it again on the same port and data.
    ///
    /// # Errors
    ///
    /// `pg_ctl` failed.
    pub fn restart(&self) -> Result<(), String> {
        self.pg_ctl_start()
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates database `db`.
    ///
    /// # Errors
    ///
    /// The server refused.
    pub fn create_database(&self, db: &str) -> Result<String, String> {
        let mut c =
            postgres::Client::connect(&self.url("postgres"), postgres::NoTls).map_err(|e| e.to_string())?;
        c.batch_execute(&format!("CREATE DATABASE {db}"))
            .map_err(|e| e.to_string())?;
        Ok(self.url(db))
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
