//! Device regions over TCP (`Connection::register_device`): a peer's WRITE
//! lands through each lane's stager, piece by piece, acknowledged only once
//! every copy ended; the region is a WRITE target and nothing else; a
//! stager that fails refuses that WRITE and leaves the connection usable.
//! The "device" here is host memory the test's sink copies into, so the
//! bytes can be checked.

mod suite;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hipfs_rdma::{DeviceSink, Error, Result, Stager};
use suite::*;

fn env() -> Env {
    Env::tcp()
}

/// Bytes per staging buffer: small, so a WRITE spans many pieces.
const PIECE: usize = 64 << 10;

#[derive(Default)]
struct Counts {
    stagers: AtomicUsize,
    copies: AtomicUsize,
    /// The longest copy the transport asked for (must fit one buffer).
    max_copy: AtomicUsize,
    /// After this many copies, every copy fails (0: never).
    fail_after: AtomicUsize,
}

struct TestSink(Arc<Counts>);

struct TestStager {
    bufs: [Vec<u8>; 2],
    next: usize,
    /// Copies "in flight": applied at flush, as a real copy engine would
    /// finish them later.
    open: Vec<(usize, u64, usize)>,
    counts: Arc<Counts>,
}

impl DeviceSink for TestSink {
    fn stager(&self) -> Result<Box<dyn Stager>> {
        self.0.stagers.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(TestStager {
            bufs: [vec![0; PIECE], vec![0; PIECE]],
            next: 0,
            open: Vec::new(),
            counts: self.0.clone(),
        }))
    }
}

impl TestStager {
    fn apply(&mut self, upto: usize) {
        for (b, dst, len) in self.open.drain(..upto) {
            // SAFETY: the transport promised `dst..dst+len` lies in the
            // registered "device" range, a live Buf of the test.
            unsafe { std::ptr::copy_nonoverlapping(self.bufs[b].as_ptr(), dst as *mut u8, len) };
        }
    }
}

impl Stager for TestStager {
    fn next_buf(&mut self, len: usize) -> Result<&mut [u8]> {
        // The buffer's last copy must end before it is reused.
        let b = self.next;
        if let Some(i) = self.open.iter().position(|(ob, _, _)| *ob == b) {
            self.apply(i + 1);
        }
        Ok(&mut self.bufs[b][..len.min(PIECE)])
    }

    unsafe fn copy_out(&mut self, dst: u64, len: usize) -> Result<()> {
        let n = self.counts.copies.fetch_add(1, Ordering::SeqCst) + 1;
        let f = self.counts.fail_after.load(Ordering::SeqCst);
        if f != 0 && n > f {
            return Err(Error::Unsupported("the test's copy engine is off".into()));
        }
        self.counts.max_copy.fetch_max(len, Ordering::SeqCst);
        self.open.push((self.next, dst, len.min(PIECE)));
        self.next = 1 - self.next;
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let n = self.open.len();
        self.apply(n);
        Ok(())
    }
}

#[test]
fn a_write_into_a_device_region_lands_through_the_lanes_stagers_in_pieces() {
    let p = pair(&env());
    let counts = Arc::new(Counts::default());
    let sink: Arc<dyn DeviceSink> = Arc::new(TestSink(counts.clone()));
    let n = (5 << 20) + 4321;
    let device = Buf::new(n);
    // SAFETY: the Buf outlives the region (dropped first, below).
    let region = unsafe {
        p.server
            .register_device(device.ptr() as u64, n, sink.clone())
    }
    .unwrap();
    let desc = region.descriptor();
    let mut src = Buf::new(n);
    src.fill(11);
    let sr = src.register(&*p.client);
    // From several threads at once, at odd offsets: every lane may carry a piece.
    let parts = 7;
    let step = n.div_ceil(parts);
    std::thread::scope(|s| {
        for i in 0..parts {
            let (c, sr, desc) = (&p.client, &sr, &desc);
            s.spawn(move || {
                let off = i * step;
                let len = step.min(n - off);
                c.write_remote(sr, off, len, desc, off as u64).unwrap();
            });
        }
    });
    // Acknowledged means copied: the bytes are there now.
    assert!(device.bytes() == src.bytes(), "device bytes differ");
    let copies = counts.copies.load(Ordering::SeqCst);
    assert!(copies >= n / PIECE, "{copies} copies for {n} bytes");
    // Pieces never longer than the buffer they were received into (the
    // fake applies at most a buffer's worth, so a longer one would also
    // leave the device bytes wrong).
    let longest = counts.max_copy.load(Ordering::SeqCst);
    assert!(
        longest <= PIECE,
        "a copy of {longest} bytes from a {PIECE}-byte buffer"
    );
    let stagers = counts.stagers.load(Ordering::SeqCst);
    assert!(
        (1..=env().cfg().lanes.max(1)).contains(&stagers),
        "{stagers} stagers"
    );

    // A device region is a WRITE target only: no READ of it, and not the
    // local side of an operation.
    let back = Buf::new(PIECE);
    let br = back.register(&*p.client);
    assert!(matches!(
        p.client.read_remote(&br, 0, PIECE, &desc, 0),
        Err(Error::RemoteRejected(_))
    ));
    let client_side = Buf::new(PIECE);
    // SAFETY: the Buf outlives the region.
    let local = unsafe {
        p.client
            .register_device(client_side.ptr() as u64, PIECE, sink)
    }
    .unwrap();
    let server_buf = Buf::new(PIECE);
    let server_region = server_buf.register(&*p.server);
    assert!(matches!(
        p.client
            .write_remote(&local, 0, PIECE, &server_region.descriptor(), 0),
        Err(Error::InvalidArgument(_))
    ));
    drop(local);
    drop(region);
}

#[test]
fn a_stager_that_fails_refuses_its_write_and_the_connection_goes_on() {
    let p = pair(&env());
    let counts = Arc::new(Counts::default());
    counts.fail_after.store(3, Ordering::SeqCst);
    let sink: Arc<dyn DeviceSink> = Arc::new(TestSink(counts.clone()));
    let n = 1 << 20;
    let device = Buf::new(n);
    // SAFETY: the Buf outlives the region.
    let region = unsafe { p.server.register_device(device.ptr() as u64, n, sink) }.unwrap();
    let desc = region.descriptor();
    let mut src = Buf::new(n);
    src.fill(5);
    let sr = src.register(&*p.client);
    let err = p.client.write_remote(&sr, 0, n, &desc, 0).unwrap_err();
    assert!(matches!(err, Error::RemoteRejected(_)), "{err}");
    // The stream stayed in step: a host WRITE and messages still work.
    let host = Buf::new(n);
    let (_hr, hdesc) = share(&p, &host);
    p.client.write_remote(&sr, 0, n, &hdesc, 0).unwrap();
    assert!(host.bytes() == src.bytes());
    p.client.send(b"still here").unwrap();
    assert_eq!(
        p.server.recv(std::time::Duration::from_secs(5)).unwrap(),
        b"still here"
    );
    // With the copies working again the device region takes the bytes.
    counts.fail_after.store(0, Ordering::SeqCst);
    p.client.write_remote(&sr, 0, n, &desc, 0).unwrap();
    assert!(device.bytes() == src.bytes());
    drop(region);
}
