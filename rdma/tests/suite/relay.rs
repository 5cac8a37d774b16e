//! A relaying TCP proxy that records every byte passing through it in
//! either direction: lets a test look at what is on the wire without a
//! packet capture.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;

pub struct Relay {
    /// Where clients connect.
    pub addr: String,
    /// Everything that passed: one buffer per stream and direction.
    pub seen: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Relay {
    /// Relays every connection made to the returned address to `upstream`.
    pub fn start(upstream: &str) -> Relay {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (up, rec) = (upstream.to_string(), seen.clone());
        thread::spawn(move || {
            while let Ok((down, _)) = l.accept() {
                let Ok(upc) = TcpStream::connect(&up) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (down.try_clone().unwrap(), upc.try_clone().unwrap()),
                    (upc, down),
                ] {
                    let rec = rec.clone();
                    let i = {
                        let mut r = rec.lock().unwrap();
                        r.push(Vec::new());
                        r.len() - 1
                    };
                    thread::spawn(move || {
                        let mut b = vec![0u8; 64 * 1024];
                        loop {
                            match from.read(&mut b) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => {
                                    rec.lock().unwrap()[i].extend_from_slice(&b[..n]);
                                    if to.write_all(&b[..n]).is_err() {
                                        break;
                                    }
                                }
                            }
                        }
                        let _ = to.shutdown(Shutdown::Write);
                    });
                }
            }
        });
        Relay { addr, seen }
    }

    /// Whether `needle` appears anywhere in what passed.
    pub fn saw(&self, needle: &[u8]) -> bool {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.windows(needle.len()).any(|w| w == needle))
    }

    pub fn bytes_seen(&self) -> usize {
        self.seen.lock().unwrap().iter().map(Vec::len).sum()
    }
}
