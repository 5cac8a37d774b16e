//! hipfs: the hipFile API.
