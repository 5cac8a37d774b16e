//! hipfs-fusefs: the FUSE adapter.
