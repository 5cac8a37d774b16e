//! Property tests of the codec: every message round-trips, and no byte
//! string (random, truncated or mutated) makes a decoder panic.

use std::time::{Duration, UNIX_EPOCH};

use hipfs_fusefs::{Attr, Entry, FileKind, StatFs};
use hipfs_rdma::{DescriptorTransport, RemoteDescriptor};
use proptest::prelude::*;

use super::*;

fn name() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        any::<u8>().prop_filter("no / or NUL", |b| *b != b'/' && *b != 0),
        1..20,
    )
    .prop_filter("not . or ..", |n| n != b"." && n != b"..")
}

fn path() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(name(), 0..4).prop_map(|v| v.join(&b'/'))
}

fn cred() -> impl Strategy<Value = WireCred> {
    (
        any::<u32>(),
        any::<u32>(),
        proptest::collection::vec(any::<u32>(), 0..8),
    )
        .prop_map(|(uid, gid, groups)| WireCred { uid, gid, groups })
}

fn time() -> impl Strategy<Value = Option<WireTime>> {
    prop_oneof![
        Just(None),
        Just(Some(WireTime::Now)),
        (any::<i64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Some(WireTime::At(s, n))),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let dest = (
        0u64..1 << 62,
        0u64..1 << 62,
        any::<u32>(),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(addr, len, rkey, verbs, offset)| ReadDest {
            region: RemoteDescriptor {
                addr,
                len,
                rkey,
                transport: if verbs {
                    DescriptorTransport::Verbs
                } else {
                    DescriptorTransport::Tcp
                },
            },
            offset,
        });
    prop_oneof![
        path().prop_map(|path| Op::Lookup { path }),
        (path(), any::<Option<u64>>()).prop_map(|(path, fh)| Op::Getattr { path, fh }),
        (
            path(),
            any::<Option<u64>>(),
            any::<Option<u32>>(),
            any::<Option<u64>>(),
            time(),
            time()
        )
            .prop_map(|(path, fh, mode, size, atime, mtime)| Op::Setattr {
                path,
                fh,
                set: WireSetAttr {
                    mode,
                    uid: mode,
                    gid: None,
                    size,
                    atime,
                    mtime
                },
            }),
        (path(), any::<u64>(), any::<u32>()).prop_map(|(path, cookie, max)| Op::Readdir {
            path,
            cookie,
            max
        }),
        (path(), any::<i32>()).prop_map(|(path, flags)| Op::Open { path, flags }),
        (path(), any::<i32>(), any::<u32>()).prop_map(|(path, flags, max)| Op::OpenHead {
            path,
            flags,
            max
        }),
        (path(), any::<u64>(), any::<u32>(), any::<u32>()).prop_map(
            |(path, cookie, max_each, max_total)| Op::ReadHeads {
                path,
                cookie,
                max_each,
                max_total
            }
        ),
        (path(), any::<u32>(), any::<i32>()).prop_map(|(path, mode, flags)| Op::Create {
            path,
            mode,
            flags
        }),
        any::<u64>().prop_map(|fh| Op::Release { fh }),
        (
            any::<u64>(),
            any::<u64>(),
            0u32..=(MAX_IO as u32),
            proptest::option::of(dest)
        )
            .prop_map(|(fh, offset, len, dest)| Op::Read {
                fh,
                offset,
                len,
                dest
            }),
        (
            any::<u64>(),
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..300)
        )
            .prop_map(|(fh, offset, data)| Op::Write { fh, offset, data }),
        (any::<u64>(), any::<bool>()).prop_map(|(fh, datasync)| Op::Fsync { fh, datasync }),
        (
            any::<u64>(),
            proptest::collection::vec(
                prop_oneof![
                    (any::<u64>(), proptest::collection::vec(any::<u8>(), 0..100))
                        .prop_map(|(offset, data)| Step::Write { offset, data }),
                    (any::<Option<u32>>(), time(), time()).prop_map(|(mode, atime, mtime)| {
                        Step::Setattr(WireSetAttr {
                            mode,
                            uid: mode,
                            gid: None,
                            size: None,
                            atime,
                            mtime,
                        })
                    }),
                ],
                0..6
            )
        )
            .prop_map(|(fh, steps)| Op::Apply { fh, steps }),
        (path(), path(), any::<u32>()).prop_map(|(from, to, flags)| Op::Rename { from, to, flags }),
        (path(), proptest::collection::vec(1u8..=255, 0..50))
            .prop_map(|(path, target)| Op::Symlink { path, target }),
        (path(), path()).prop_map(|(from, to)| Op::Link { from, to }),
        (path(), any::<u32>(), any::<u32>()).prop_map(|(path, mode, rdev)| Op::Mknod {
            path,
            mode,
            rdev
        }),
        (
            path(),
            name(),
            proptest::collection::vec(any::<u8>(), 0..100),
            any::<i32>()
        )
            .prop_map(|(path, name, value, flags)| Op::Setxattr {
                path,
                name,
                value,
                flags
            }),
        (path(), name()).prop_map(|(path, name)| Op::Removexattr { path, name }),
        path().prop_map(|path| Op::Statfs { path }),
    ]
}

fn attr() -> impl Strategy<Value = Attr> {
    (
        any::<u64>(),
        any::<u64>(),
        0u16..=0o7777,
        any::<u32>(),
        -1_000_000i64..4_000_000_000i64,
        0u32..1_000_000_000,
    )
        .prop_map(|(ino, size, perm, nlink, s, n)| {
            let t = if s >= 0 {
                UNIX_EPOCH + Duration::new(s as u64, n)
            } else {
                UNIX_EPOCH - Duration::from_secs(s.unsigned_abs())
                    + Duration::from_nanos(u64::from(n))
            };
            Attr {
                ino,
                size,
                blocks: size / 512,
                atime: t,
                mtime: t,
                ctime: t,
                kind: FileKind::Regular,
                perm,
                nlink,
                uid: nlink,
                gid: 7,
                rdev: 0,
                blksize: 4096,
            }
        })
}

fn entry() -> impl Strategy<Value = Entry> {
    (attr(), any::<u64>()).prop_map(|(attr, generation)| Entry { attr, generation })
}

fn changed_names() -> impl Strategy<Value = Vec<ChangedName>> {
    proptest::collection::vec(
        (
            path(),
            prop_oneof![Just(Vec::new()), name()],
            any::<u64>(),
            any::<bool>(),
        ),
        0..5,
    )
    .prop_map(|v| {
        v.into_iter()
            .map(|(dir, name, ino, inode_only)| ChangedName {
                dir,
                name,
                ino,
                inode_only,
            })
            .collect()
    })
}

fn payload() -> impl Strategy<Value = Result<Payload, i32>> {
    prop_oneof![
        (1i32..4096).prop_map(Err),
        Just(Ok(Payload::Empty)),
        attr().prop_map(|a| Ok(Payload::Attr(a))),
        entry().prop_map(|e| Ok(Payload::Entry(e))),
        proptest::collection::vec((name(), any::<u64>(), entry(), any::<bool>()), 0..5).prop_map(
            |v| Ok(Payload::Dir(
                v.into_iter()
                    .map(|(name, cookie, entry, no_xattrs)| DirItem {
                        name,
                        cookie,
                        entry,
                        no_xattrs
                    })
                    .collect()
            ))
        ),
        (entry(), any::<u64>(), any::<bool>()).prop_map(|(entry, fh, no_xattrs)| Ok(
            Payload::Created {
                entry,
                fh,
                no_xattrs
            }
        )),
        (attr(), entry(), any::<u64>()).prop_map(|(parent, entry, fh)| Ok(Payload::InDir {
            parent,
            inner: Box::new(Payload::Created {
                entry,
                fh,
                no_xattrs: false
            })
        })),
        (attr(), entry()).prop_map(|(parent, e)| Ok(Payload::InDir {
            parent,
            inner: Box::new(Payload::Entry(e))
        })),
        attr().prop_map(|parent| Ok(Payload::InDir {
            parent,
            inner: Box::new(Payload::Empty)
        })),
        (
            any::<u64>(),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300))
        )
            .prop_map(|(fh, data)| Ok(Payload::OpenedHead { fh, data })),
        (
            any::<u64>(),
            proptest::collection::vec(
                (
                    name(),
                    any::<u64>(),
                    proptest::collection::vec(any::<u8>(), 0..100)
                ),
                0..4
            )
        )
            .prop_map(|(next, v)| Ok(Payload::Heads {
                items: v
                    .into_iter()
                    .map(|(name, ino, data)| HeadItem { name, ino, data })
                    .collect(),
                next
            })),
        proptest::collection::vec(any::<u8>(), 0..300).prop_map(|data| Ok(Payload::Read {
            n: data.len() as u32,
            data
        })),
        any::<u32>().prop_map(|n| Ok(Payload::Written(n))),
        proptest::collection::vec(name(), 0..5).prop_map(|v| Ok(Payload::Names(v))),
        // The version 2-4 form carries no kinds: they decode as `false`.
        (changed_names(), any::<bool>()).prop_map(|(names, everything)| Ok(Payload::Changed {
            names: names
                .into_iter()
                .map(|n| ChangedName {
                    inode_only: false,
                    ..n
                })
                .collect(),
            everything
        })),
        (changed_names(), any::<bool>())
            .prop_map(|(names, everything)| Ok(Payload::ChangedKinds { names, everything })),
        any::<(u64, u64, u32)>().prop_map(|(a, b, c)| Ok(Payload::Statfs(StatFs {
            blocks: a,
            bfree: b,
            bavail: b,
            files: a,
            ffree: b,
            bsize: c,
            namelen: 255,
            frsize: c
        }))),
    ]
}

#[test]
fn a_notice_takes_the_form_its_reader_speaks() {
    let names = vec![ChangedName {
        dir: b"d".to_vec(),
        name: b"f".to_vec(),
        ino: 7,
        inode_only: true,
    }];
    let read_by = |version| {
        let msg = Reply {
            id: NOTICE_ID,
            result: Ok(Payload::notice(names.clone(), false, version)),
        }
        .encode();
        Reply::decode(&msg).unwrap().result.unwrap()
    };
    // A version 4 client reads tag 13 only; it learns no kinds.
    let old = read_by(NOTICE_KIND_VERSION - 1);
    assert!(matches!(old, Payload::Changed { .. }));
    assert!(!old.into_changes().unwrap().0[0].inode_only);
    let new = read_by(NOTICE_KIND_VERSION);
    assert!(matches!(new, Payload::ChangedKinds { .. }));
    assert_eq!(new.into_changes(), Some((names.clone(), false)));
}

#[test]
fn nested_directory_attributes_are_refused() {
    let a = Attr {
        ino: 5,
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        kind: FileKind::Directory,
        perm: 0o755,
        nlink: 2,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
    };
    let inner = Payload::InDir {
        parent: a,
        inner: Box::new(Payload::Empty),
    };
    let msg = Reply {
        id: 9,
        result: Ok(Payload::InDir {
            parent: a,
            inner: Box::new(inner),
        }),
    }
    .encode();
    assert!(matches!(
        Reply::decode(&msg),
        Err(ProtoError::BadValue("nested directory attributes", 16))
    ));
}

proptest! {
    #[test]
    fn every_request_round_trips(id in any::<u64>(), cred in cred(), op in op()) {
        let req = Request { id, cred, op };
        prop_assert_eq!(Request::decode(&req.encode()).unwrap(), req);
    }

    #[test]
    fn every_reply_round_trips(id in any::<u64>(), result in payload()) {
        let reply = Reply { id, result };
        prop_assert_eq!(Reply::decode(&reply.encode()).unwrap(), reply);
    }

    #[test]
    fn decoders_never_panic_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = Request::decode(&bytes);
        let _ = Reply::decode(&bytes);
        let _ = Hello::decode(&bytes);
        let _ = Challenge::decode(&bytes);
        let _ = Proof::decode(&bytes);
        let _ = Welcome::decode(&bytes);
        let _ = Refused::decode(&bytes);
        let _ = Request::peek_id(&bytes);
    }

    #[test]
    fn every_truncation_of_a_request_is_an_error(id in any::<u64>(), cred in cred(), op in op()) {
        let msg = Request { id, cred, op }.encode();
        for cut in 0..msg.len() {
            prop_assert!(Request::decode(&msg[..cut]).is_err(), "cut at {}", cut);
        }
    }

    #[test]
    fn mutated_requests_decode_to_errors_or_valid_paths(
        id in any::<u64>(), cred in cred(), op in op(), at in any::<usize>(), val in any::<u8>()
    ) {
        let mut msg = Request { id, cred, op }.encode();
        let i = at % msg.len();
        msg[i] = val;
        if let Ok(req) = Request::decode(&msg) {
            // Whatever decodes must still satisfy every path rule.
            let paths: Vec<&Vec<u8>> = match &req.op {
                Op::Lookup { path }
                | Op::Open { path, .. }
                | Op::OpenHead { path, .. }
                | Op::ReadHeads { path, .. }
                | Op::Statfs { path } => vec![path],
                Op::Rename { from, to, .. } | Op::Link { from, to } => vec![from, to],
                _ => vec![],
            };
            for p in paths {
                prop_assert!(validate_rel_path(p).is_ok());
            }
        }
    }

    #[test]
    fn handshake_messages_round_trip(nonce in any::<[u8; 32]>(), v in any::<u16>(), ro in any::<bool>(), s in "[a-z/]{0,40}") {
        let h = Hello { min_version: v, max_version: v, nonce };
        prop_assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
        let c = Challenge { version: v, nonce, auth_required: ro };
        prop_assert_eq!(Challenge::decode(&c.encode()).unwrap(), c);
        let w = Welcome { export: s.clone(), read_only: ro, mac: nonce, export_id: None };
        prop_assert_eq!(Welcome::decode(&w.encode()).unwrap(), w.clone());
        let w3 = Welcome { export_id: Some(s.clone()), ..w };
        prop_assert_eq!(Welcome::decode(&w3.encode()).unwrap(), w3);
        let r = Refused { reason: s };
        prop_assert_eq!(Refused::decode(&r.encode()).unwrap(), r);
    }
}

#[test]
fn crafted_paths_are_refused_with_reasons() {
    for bad in [
        &b"../x"[..],
        b"/abs",
        b"a//b",
        b"a/./b",
        b"a/",
        b"a\0b",
        b"..",
    ] {
        assert!(
            validate_rel_path(bad).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    assert!(matches!(
        validate_rel_path(&[b'n'; 256]),
        Err(ProtoError::TooLong { .. })
    ));
    assert!(validate_rel_path(&[b'n'; 255]).is_ok());
    assert!(validate_rel_path(b"").is_ok());
    assert!(validate_rel_path(b"a/b.c/..d").is_ok());
    // Deeper than PATH_MAX below the root is fine (the kernel limits a
    // caller's path from its working directory, not a tree's depth).
    let comp = [b'd'; 200];
    let deep = |n: usize| vec![&comp[..]; n].join(&b'/');
    assert!(validate_rel_path(&deep(40)).is_ok());
    assert!(deep(40).len() > 4096);
    assert!(matches!(
        validate_rel_path(&deep(200)),
        Err(ProtoError::TooLong { what: "path", .. })
    ));
}

#[test]
fn forged_counts_and_lengths_are_refused_before_allocating() {
    let mut w = Writer::default();
    w.u8(Kind::Reply as u8).u64(1).u8(4).u32(u32::MAX);
    assert!(matches!(
        Reply::decode(&w.finish()),
        Err(ProtoError::TooLong { .. })
    ));
    let mut w = Writer::default();
    w.u8(Kind::Reply as u8).u64(1).u8(4).u32(4000);
    assert!(matches!(
        Reply::decode(&w.finish()),
        Err(ProtoError::Truncated(_))
    ));
    let mut w = Writer::default();
    w.u8(Kind::Request as u8)
        .u64(1)
        .u32(0)
        .u32(0)
        .u32(0)
        .u16(8)
        .u64(1)
        .u64(0)
        .u32(u32::MAX)
        .u8(0);
    assert!(matches!(
        Request::decode(&w.finish()),
        Err(ProtoError::TooLong { .. })
    ));
}

#[test]
fn version_negotiation_picks_the_highest_common_and_explains_a_mismatch() {
    let h = Hello {
        min_version: 1,
        max_version: PROTO_VERSION + 3,
        nonce: [0; 32],
    };
    assert_eq!(h.negotiate(), Ok(PROTO_VERSION));
    // A version 2 client (no export id in the welcome) is still served.
    let v2 = Hello {
        min_version: 2,
        max_version: 2,
        nonce: [0; 32],
    };
    assert_eq!(v2.negotiate(), Ok(2));
    let h = Hello {
        min_version: PROTO_VERSION + 1,
        max_version: PROTO_VERSION + 2,
        nonce: [0; 32],
    };
    let why = h.negotiate().unwrap_err();
    let range = format!("{}..={}", PROTO_VERSION + 1, PROTO_VERSION + 2);
    assert!(
        why.contains(&range) && why.contains("same hipfs release"),
        "{why}"
    );
    // A version-1 client (no message authentication) is refused.
    let old = Hello {
        min_version: 1,
        max_version: 1,
        nonce: [0; 32],
    };
    let why = old.negotiate().unwrap_err();
    assert!(why.contains("1..=1"), "{why}");
}

/// Found by the fuzz target: a time 2^63 s before the epoch decoded, and
/// re-encoding it overflowed while negating the seconds.
#[test]
fn times_at_the_edges_of_i64_seconds_round_trip_without_overflow() {
    for (s, n) in [
        (i64::MIN, 0),
        (i64::MIN, 1),
        (i64::MIN + 1, 999_999_999),
        (-1, 1),
    ] {
        let t = types::join_time(s, n);
        assert_eq!(types::split_time(t), (s, n), "{s} s {n} ns");
    }
    assert_eq!(types::split_time(UNIX_EPOCH), (0, 0));
}
