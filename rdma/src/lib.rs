//! hipfs-rdma: moves bytes between hosts.
