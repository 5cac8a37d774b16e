//! hipfs remote: `hipfs serve` exports a directory, `hipfs mount` makes it a
//! local directory through FUSE, and `FileHandleType::UserspaceFs` handles
//! read its files without FUSE.
//!
//! - [`proto`]: the versioned wire protocol (messages, handshake, bounds-checked decoding).
//! - [`server`]: the multi-threaded server acting as each calling user beneath the export.
//! - [`client`]: the reconnecting client, the FUSE backend over it, and the UserspaceFs binding.
//! - [`mount`]: `hipfs mount` in the library (foreground, daemon, `--local`).
//!
//! ```no_run
//! use hipfs::remote::{server::{Server, ServeConfig}, client::{ClientConfig, RemoteClient}};
//! let server = Server::start(ServeConfig::new("/srv/data", "127.0.0.1:0"))?;
//! let client = RemoteClient::connect(ClientConfig::new(server.local_addr()))?;
//! # Ok::<(), hipfs::remote::RemoteError>(())
//! ```

pub mod auth;
pub mod client;
mod error;
pub mod mount;
mod placed_read;
pub mod proto;
pub mod seal;
pub mod server;

pub use error::RemoteError;
