//! Driver properties and the parameter API (`hipFileGet/SetParameter*`).
//!
//! Parameters are staged: they can be set only while the driver is closed and
//! take effect at the next open, when they are copied into the active
//! [`Config`] that the I/O engine reads.

use crate::error::{Error, OpError, Result};

macro_rules! params {
    ($ty:ident, $($name:ident),* $(,)?) => {
        /// A parameter, with the C enumeration's ordinal.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum $ty { $(#[doc = concat!("`", stringify!($name), "`, as the C API names it.")] $name,)* }
        impl $ty {
            /// Every parameter in ordinal order.
            pub const ALL: &'static [$ty] = &[$($ty::$name,)*];
            /// The parameter for a C ordinal.
            pub fn from_ordinal(n: u32) -> Option<$ty> {
                Self::ALL.get(n as usize).copied()
            }
            /// Its name without the `hipFileParam` prefix.
            pub fn name(self) -> &'static str {
                match self { $($ty::$name => stringify!($name),)* }
            }
        }
    };
}

params!(
    SizeTParam,
    ProfileStats,
    ExecutionMaxIOQueueDepth,
    ExecutionMaxIOThreads,
    ExecutionMinIOThresholdSizeKB,
    ExecutionMaxRequestParallelism,
    PropertiesMaxDirectIOSizeKB,
    PropertiesMaxDeviceCacheSizeKB,
    PropertiesPerBufferCacheSizeKB,
    PropertiesMaxDevicePinnedMemSizeKB,
    PropertiesIOBatchsize,
    PollthresholdSizeKB,
    PropertiesBatchIOTimeoutMs,
);

params!(
    BoolParam,
    PropertiesUsePollMode,
    PropertiesAllowCompatMode,
    ForceCompatMode,
    FsMiscApiCheckAggressive,
    ExecutionParallelIO,
    ProfileNvtx,
    PropertiesAllowSystemMemory,
    UsePcip2pdma,
    PreferIOUring,
    ForceOdirectMode,
    SkipTopologyDetection,
    StreamMemopsBypass,
    HipfsOpaqueFdDirect,
);

params!(StringParam, LoggingLevel, EnvLogfilePath, LogDir);

impl BoolParam {
    /// The C ordinal of hipfs's own boolean parameter
    /// (`hipFileParamHipfsOpaqueFdDirect`), far from the vendors' numbers so
    /// a later hipFile or cuFile parameter cannot collide with it.
    pub const HIPFS_OPAQUE_FD_DIRECT_ORDINAL: u32 = 100;

    /// The parameter for a C ordinal: the vendor's enumeration, or
    /// [`Self::HIPFS_OPAQUE_FD_DIRECT_ORDINAL`].
    pub fn from_c_ordinal(n: u32) -> Option<BoolParam> {
        if n == Self::HIPFS_OPAQUE_FD_DIRECT_ORDINAL {
            return Some(BoolParam::HipfsOpaqueFdDirect);
        }
        BoolParam::from_ordinal(n).filter(|p| *p != BoolParam::HipfsOpaqueFdDirect)
    }
}

/// Every tunable of the library. One copy is staged (what the parameter API
/// edits), one is active (what the open driver uses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    sizes: [usize; 12],
    bools: [bool; 13],
    strings: [String; 3],
    /// Comma-separated filesystem type names treated as not supporting O_DIRECT
    /// (`HIPFILE_UNSUPPORTED_FILE_SYSTEMS`).
    pub unsupported_filesystems: Vec<String>,
    /// `HIPFILE_STATS_LEVEL` (0 = off).
    pub stats_level: u32,
    /// Whether to try the page cache (`preadv2(RWF_NOWAIT)`) before O_DIRECT on reads.
    pub page_cache_probe: bool,
}

impl Default for Config {
    fn default() -> Config {
        let threads = std::thread::available_parallelism().map_or(4, |n| n.get());
        Config {
            sizes: [
                0,              // ProfileStats
                128,            // ExecutionMaxIOQueueDepth
                threads.max(4), // ExecutionMaxIOThreads
                1024,           // ExecutionMinIOThresholdSizeKB
                threads.max(4), // ExecutionMaxRequestParallelism
                16384,          // PropertiesMaxDirectIOSizeKB
                131072,         // PropertiesMaxDeviceCacheSizeKB
                1024,           // PropertiesPerBufferCacheSizeKB
                33554432,       // PropertiesMaxDevicePinnedMemSizeKB
                128,            // PropertiesIOBatchsize
                4,              // PollthresholdSizeKB
                5,              // PropertiesBatchIOTimeoutMs
            ],
            bools: [
                false, // PropertiesUsePollMode
                true,  // PropertiesAllowCompatMode
                false, // ForceCompatMode
                false, // FsMiscApiCheckAggressive
                true,  // ExecutionParallelIO
                false, // ProfileNvtx
                true,  // PropertiesAllowSystemMemory
                false, // UsePcip2pdma
                false, // PreferIOUring
                false, // ForceOdirectMode
                false, // SkipTopologyDetection
                false, // StreamMemopsBypass
                // OPAQUE_FD handles on hipfs mounts take the direct path.
                true, // HipfsOpaqueFdDirect
            ],
            strings: ["ERROR".to_string(), String::new(), String::new()],
            // O_DIRECT on a FUSE file skips the local page cache and costs the
            // daemon a round trip per request; hipfs mounts have the
            // UserspaceFs path for direct transfers instead.
            unsupported_filesystems: vec!["fuse".to_string()],
            stats_level: 0,
            page_cache_probe: true,
        }
    }
}

/// A whole number from the environment variable `name`, if it is set,
/// parses and lies in `range`; `None` otherwise (the caller's default).
/// For the measuring knobs read once by the I/O paths.
pub(crate) fn env_usize(name: &str, range: std::ops::RangeInclusive<usize>) -> Option<usize> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| range.contains(n))
}

/// Parses a hipFile boolean: `true`/`false`, case-insensitive (also 1/0, yes/no, on/off).
pub fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

impl Config {
    /// Defaults overlaid with the documented environment variables.
    pub fn from_env() -> Config {
        let mut c = Config::default();
        c.apply_env(|k| std::env::var(k).ok());
        c
    }

    /// Applies environment variables read through `get` (injectable for tests).
    pub fn apply_env(&mut self, get: impl Fn(&str) -> Option<String>) {
        let bool_var = |name: &str| {
            let v = get(name)?;
            let parsed = parse_bool(&v);
            if parsed.is_none() {
                log::warn!("{name}={v:?} is not a boolean (true/false); ignored");
            }
            parsed
        };
        let size_var = |name: &str| {
            let v = get(name)?;
            match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    log::warn!("{name}={v:?} is not a positive integer; ignored");
                    None
                }
            }
        };
        if let Some(b) = bool_var("HIPFILE_ALLOW_COMPAT_MODE") {
            self.set_bool(BoolParam::PropertiesAllowCompatMode, b);
        }
        if let Some(b) = bool_var("HIPFILE_FORCE_COMPAT_MODE") {
            self.set_bool(BoolParam::ForceCompatMode, b);
        }
        if let Some(v) = get("HIPFILE_STATS_LEVEL") {
            self.stats_level = v.trim().parse().unwrap_or(0);
        }
        if let Some(v) = get("HIPFILE_UNSUPPORTED_FILE_SYSTEMS") {
            self.unsupported_filesystems = v
                .split([',', ' ', ':'])
                .map(|s| s.trim().to_ascii_lowercase())
                .filter(|s| !s.is_empty())
                .collect();
        }
        if let Some(n) = size_var("HIPFS_IO_THREADS") {
            self.set_size(SizeTParam::ExecutionMaxIOThreads, n);
            self.set_size(SizeTParam::ExecutionMaxRequestParallelism, n);
        }
        if let Some(n) = size_var("HIPFS_CHUNK_KB") {
            self.set_size(SizeTParam::PropertiesMaxDirectIOSizeKB, n);
        }
        if let Some(n) = size_var("HIPFS_PARALLEL_THRESHOLD_KB") {
            self.set_size(SizeTParam::ExecutionMinIOThresholdSizeKB, n);
        }
        if let Some(b) = bool_var("HIPFS_OPAQUE_FD_DIRECT") {
            self.set_bool(BoolParam::HipfsOpaqueFdDirect, b);
        }
        if let Some(b) = bool_var("HIPFS_PAGE_CACHE_PROBE") {
            self.page_cache_probe = b;
        }
        if let Some(v) = get("HIPFILE_LOGGING_LEVEL") {
            self.strings[StringParam::LoggingLevel as usize] = v;
        }
    }

    /// A size parameter.
    pub fn size(&self, p: SizeTParam) -> usize {
        self.sizes[p as usize]
    }

    /// A boolean parameter.
    pub fn get_bool(&self, p: BoolParam) -> bool {
        self.bools[p as usize]
    }

    /// A string parameter.
    pub fn string(&self, p: StringParam) -> &str {
        &self.strings[p as usize]
    }

    /// Sets a size parameter (no open/closed rule here: see `driver`).
    pub fn set_size(&mut self, p: SizeTParam, v: usize) {
        self.sizes[p as usize] = v;
    }

    /// Sets a boolean parameter.
    pub fn set_bool(&mut self, p: BoolParam, v: bool) {
        self.bools[p as usize] = v;
    }

    /// Sets a string parameter; refuses strings with interior NULs or over 4 KiB.
    pub fn set_string(&mut self, p: StringParam, v: &str) -> Result<()> {
        if v.len() > 4096 || v.contains('\0') {
            return Err(Error::new(
                OpError::InvalidValue,
                "string parameter must be at most 4096 bytes without NUL",
            ));
        }
        self.strings[p as usize] = v.to_string();
        Ok(())
    }

    /// Number of worker threads for one large request.
    pub fn io_threads(&self) -> usize {
        self.size(SizeTParam::ExecutionMaxIOThreads)
            .min(self.size(SizeTParam::ExecutionMaxRequestParallelism))
            .clamp(1, 256)
    }

    /// Bytes per chunk a worker moves at once.
    pub fn chunk_bytes(&self) -> usize {
        (self
            .size(SizeTParam::PropertiesMaxDirectIOSizeKB)
            .clamp(4, 1 << 20))
            * 1024
    }

    /// Requests at least this large are split across workers.
    pub fn parallel_threshold(&self) -> usize {
        self.size(SizeTParam::ExecutionMinIOThresholdSizeKB)
            .saturating_mul(1024)
    }

    /// Whether OPAQUE_FD handles on a hipfs mount bypass FUSE (read and
    /// write the server directly, as UserspaceFs handles do).
    pub fn opaque_fd_direct(&self) -> bool {
        self.get_bool(BoolParam::HipfsOpaqueFdDirect)
    }

    /// Whether the direct path is bypassed for everything.
    pub fn force_compat(&self) -> bool {
        self.get_bool(BoolParam::ForceCompatMode)
    }

    /// Whether falling back to buffered I/O is allowed.
    pub fn allow_compat(&self) -> bool {
        self.get_bool(BoolParam::PropertiesAllowCompatMode)
    }
}

/// `hipFileDriverProps_t`, sizes in KiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DriverProperties {
    /// Major version.
    pub major_version: u32,
    /// Minor version.
    pub minor_version: u32,
    /// Reads up to this size poll instead of sleeping (KiB).
    pub poll_thresh_size: u64,
    /// Largest single direct I/O (KiB).
    pub max_direct_io_size: u64,
    /// Bits of `status_flags`.
    pub driver_status_flags: u32,
    /// Bits of `control_flags`.
    pub driver_control_flags: u32,
    /// Bits of `feature_flags`.
    pub feature_flags: u32,
    /// Pinned bounce memory for all devices (KiB).
    pub max_device_cache_size: u64,
    /// Bounce memory per buffer (KiB).
    pub per_buffer_cache_size: u64,
    /// Largest pinned memory per device (KiB).
    pub max_device_pinned_mem_size: u64,
    /// Most operations in one batch.
    pub max_batch_io_count: u32,
    /// Batch timeout in milliseconds.
    pub max_batch_io_timeout_msecs: u32,
}

/// Driver status flag bits (`hipFileDriverStatusFlags_t`).
pub mod status_flags {
    /// Lustre supported.
    pub const LUSTRE: u32 = 0;
    /// WekaFS supported.
    pub const WEKAFS: u32 = 1;
    /// NFS supported.
    pub const NFS: u32 = 2;
    /// GPFS supported.
    pub const GPFS: u32 = 3;
    /// NVMe supported.
    pub const NVME: u32 = 4;
    /// NVMe over fabrics supported.
    pub const NVMEOF: u32 = 5;
    /// SCSI supported.
    pub const SCSI: u32 = 6;
    /// ScaleFlux computational storage supported.
    pub const SCALEFLUX_CSD: u32 = 7;
    /// NVMesh supported.
    pub const NVMESH: u32 = 8;
    /// BeeGFS supported.
    pub const BEEGFS: u32 = 9;
    /// NVMe peer-to-peer supported.
    pub const NVME_P2P: u32 = 11;
    /// ScateFS supported.
    pub const SCATEFS: u32 = 12;
}

/// Control flag bits (`hipFileDriverControlFlags_t`).
pub mod control_flags {
    /// Poll for small reads.
    pub const USE_POLL_MODE: u32 = 0;
    /// Fall back to compatibility mode.
    pub const ALLOW_COMPAT_MODE: u32 = 1;
}

/// Feature flag bits (`hipFileFeatureFlags_t`).
pub mod feature_flags {
    /// Dynamic routing.
    pub const DYN_ROUTING: u32 = 0;
    /// Batch I/O.
    pub const BATCH_IO: u32 = 1;
    /// Stream-ordered I/O.
    pub const STREAMS: u32 = 2;
    /// Parallel I/O.
    pub const PARALLEL_IO: u32 = 3;
}

/// Maximum operations in flight per batch.
pub const MAX_BATCH_IO_COUNT: u32 = 128;

impl Config {
    /// The properties this configuration gives.
    pub fn properties(&self) -> DriverProperties {
        let mut control = 0;
        if self.get_bool(BoolParam::PropertiesUsePollMode) {
            control |= 1 << control_flags::USE_POLL_MODE;
        }
        if self.allow_compat() {
            control |= 1 << control_flags::ALLOW_COMPAT_MODE;
        }
        let mut features = (1 << feature_flags::BATCH_IO) | (1 << feature_flags::STREAMS);
        if self.get_bool(BoolParam::ExecutionParallelIO) {
            features |= 1 << feature_flags::PARALLEL_IO;
        }
        DriverProperties {
            major_version: crate::VERSION_MAJOR,
            minor_version: crate::VERSION_MINOR,
            poll_thresh_size: self.size(SizeTParam::PollthresholdSizeKB) as u64,
            max_direct_io_size: self.size(SizeTParam::PropertiesMaxDirectIOSizeKB) as u64,
            driver_status_flags: (1 << status_flags::NVME) | (1 << status_flags::SCSI),
            driver_control_flags: control,
            feature_flags: features,
            max_device_cache_size: self.size(SizeTParam::PropertiesMaxDeviceCacheSizeKB) as u64,
            per_buffer_cache_size: self.size(SizeTParam::PropertiesPerBufferCacheSizeKB) as u64,
            max_device_pinned_mem_size: self.size(SizeTParam::PropertiesMaxDevicePinnedMemSizeKB)
                as u64,
            max_batch_io_count: MAX_BATCH_IO_COUNT,
            max_batch_io_timeout_msecs: self.size(SizeTParam::PropertiesBatchIOTimeoutMs) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_ordinals_follow_the_c_enumerations() {
        assert_eq!(SizeTParam::ALL.len(), 12);
        // The twelve of hipFile, then hipfs's extension at its own ordinal.
        assert_eq!(BoolParam::ALL.len(), 13);
        assert_eq!(BoolParam::from_c_ordinal(12), None);
        assert_eq!(
            BoolParam::from_c_ordinal(100),
            Some(BoolParam::HipfsOpaqueFdDirect)
        );
        assert_eq!(
            BoolParam::from_c_ordinal(11),
            Some(BoolParam::StreamMemopsBypass)
        );
        assert_eq!(StringParam::ALL.len(), 3);
        assert_eq!(SizeTParam::PropertiesBatchIOTimeoutMs as u32, 11);
        assert_eq!(BoolParam::StreamMemopsBypass as u32, 11);
        assert_eq!(StringParam::from_ordinal(2), Some(StringParam::LogDir));
        assert_eq!(StringParam::from_ordinal(3), None);
    }

    #[test]
    fn the_opaque_fd_direct_path_is_on_by_default_and_the_environment_turns_it_off() {
        assert!(Config::default().opaque_fd_direct());
        let mut c = Config::default();
        c.apply_env(|k| (k == "HIPFS_OPAQUE_FD_DIRECT").then(|| "0".into()));
        assert!(!c.opaque_fd_direct());
    }

    #[test]
    fn compat_environment_variables_are_case_insensitive_booleans() {
        let mut c = Config::default();
        c.apply_env(|k| match k {
            "HIPFILE_ALLOW_COMPAT_MODE" => Some("FALSE".into()),
            "HIPFILE_FORCE_COMPAT_MODE" => Some("True".into()),
            "HIPFILE_UNSUPPORTED_FILE_SYSTEMS" => Some("nfs, TMPFS".into()),
            _ => None,
        });
        assert!(!c.allow_compat());
        assert!(c.force_compat());
        assert_eq!(c.unsupported_filesystems, vec!["nfs", "tmpfs"]);
        let mut d = Config::default();
        d.apply_env(|k| (k == "HIPFILE_FORCE_COMPAT_MODE").then(|| "maybe".into()));
        assert!(!d.force_compat(), "a non-boolean is ignored");
    }

    #[test]
    fn properties_reflect_the_configuration() {
        let mut c = Config::default();
        c.set_bool(BoolParam::PropertiesUsePollMode, true);
        let p = c.properties();
        assert_eq!(p.driver_control_flags & 1, 1);
        assert_eq!(p.max_batch_io_count, 128);
        assert_eq!(p.max_direct_io_size, 16384);
    }
}
