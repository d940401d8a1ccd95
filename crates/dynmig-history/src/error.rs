//! The crate's error type.

use std::path::PathBuf;

/// What failed in the history service.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or folder operation failed.
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        /// The operation, e.g. `write snapshot`.
        what: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The SQLite database failed or is not a dynmig history database.
    #[error("history database {}: {source}", path.display())]
    Db {
        /// The database file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rusqlite::Error,
    },
    /// `dynmig history show` on a database that does not exist.
    #[error("no history database at {} (dynmig history serve creates it on the controller host)", path.display())]
    NoDatabase {
        /// The path looked at.
        path: PathBuf,
    },
    /// The listening address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address given, cut to 100 characters.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The metrics endpoint (`[history] metrics_listen`) cannot be served.
    #[error("[history] metrics_listen: {0}")]
    Metrics(#[source] std::io::Error),
    /// A record could not be delivered to the server.
    #[error("history server {server}: {why}")]
    Send {
        /// The server's `host:port`, cut to 100 characters.
        server: String,
        /// What failed.
        why: String,
    },
    /// A record is malformed or out of bounds.
    #[error(transparent)]
    Record(#[from] crate::record::RecordError),
    /// Slurm's accounting (`sacctmgr`, `sacct`) failed or answered what dynmig cannot read.
    #[error("Slurm accounting: {0}")]
    Accounting(String),
    /// Slurm could not be asked for the names of the runs recorded ([`crate::naming`]).
    #[error("naming the recorded runs from Slurm: {0}")]
    Naming(String),
    /// Sealing or checking a credential failed.
    #[error(transparent)]
    Auth(#[from] crate::auth::AuthError),
}

impl Error {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Error::Io { what, path, source }
    }
}
