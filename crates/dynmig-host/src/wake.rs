//! The controller's wake-up of a node agent: "look at your node in Slurm now".
//!
//! Without it an agent learns that the controller drained its node only by asking slurmctld,
//! and it asked every 0.2-0.5 s while its node was idle or had just freed, so that an apply
//! started at once: 2-5 RPCs a second per node, 2,000-5,000 a second at 1,000 nodes, which was
//! most of slurmctld's RPCs in the queue campaign of 2026-11-28 (docs/results/queue-*.md).
//! With wake-ups the controller connects to the node's `NodeAddr` on `[agent] wake_port` after
//! it drains the node (and again every pass while the node is drained and free of jobs), and
//! the agent reads its node then, and otherwise only every [`FALLBACK_LOOK`].
//!
//! The wake-up carries nothing: the agent reads no byte of it as an instruction, and what it
//! does on a wake-up is one read of its node from slurmctld, which anyone on the cluster can
//! cause with `sinfo`. So it needs no credential; the agent takes at most one wake-up a
//! [`MIN_GAP`], whoever sends them, so that a flood costs slurmctld at most one read a second
//! per node (less than the polls it replaces).
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The line the controller sends (for a person reading a capture; the agent ignores it).
pub const LINE: &[u8] = b"dynmig wake\n";

/// How long the controller waits to connect to one agent.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);

/// How often an agent with wake-ups reads its node without one (a wake-up lost while the agent
/// restarted, or a port the site's firewall closes). The controller wakes the agent of a
/// drained node free of jobs again every pass, so a lost wake-up costs one pass; this look
/// is the last resort. At 1,000 nodes it is 17 node reads a second (2 RPCs each).
pub const FALLBACK_LOOK: Duration = Duration::from_secs(120);

/// The least time between two looks caused by wake-ups.
pub const MIN_GAP: Duration = Duration::from_secs(1);

/// The agent's side: a thread that takes connections on the wake port and raises a flag.
pub struct Listener {
    flag: Arc<AtomicBool>,
    addr: SocketAddr,
}

impl Listener {
    /// Binds `addr` and serves wake-ups on a thread of its own for the life of the process.
    ///
    /// # Errors
    /// The address cannot be bound (in use, or not the host's).
    pub fn bind(addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let flag = Arc::new(AtomicBool::new(false));
        let f = Arc::clone(&flag);
        std::thread::Builder::new().name("wake".into()).spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut c) = conn else { continue };
                f.store(true, Ordering::SeqCst);
                // Take what a well-behaved sender writes so that its close is clean; never
                // wait on a client for more than a moment, nor read more than a line.
                let _ = c.set_read_timeout(Some(Duration::from_millis(100)));
                let mut buf = [0u8; 64];
                let _ = c.read(&mut buf);
            }
        })?;
        Ok(Self { flag, addr })
    }

    /// Binds `port` on every address of the host: IPv6 and IPv4 (`[::]`), or IPv4 alone
    /// (`0.0.0.0`) where the host has no IPv6.
    ///
    /// # Errors
    /// The port cannot be bound on either.
    pub fn bind_any(port: u16) -> std::io::Result<Self> {
        Self::bind(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)))
            .or_else(|_| Self::bind(SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, port))))
    }

    /// The bound address (the port chosen when `bind` was given port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether a wake-up came since the last [`Listener::take`].
    pub fn pending(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Whether a wake-up came since the last call, clearing it.
    pub fn take(&self) -> bool {
        self.flag.swap(false, Ordering::SeqCst)
    }
}

/// What [`send`] did for one agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// Connected and wrote the line.
    Woken,
    /// The node has no address in Slurm.
    NoAddress,
    /// The address does not resolve, nothing listens, or the connection timed out.
    Failed(String),
}

/// The controller's side: wakes the agent at `address` (a Slurm `NodeAddr`: a name or an IP
/// address) on `port`, waiting at most [`CONNECT_TIMEOUT`] per address it resolves to.
pub fn send(address: &str, port: u16) -> Sent {
    if address.is_empty() {
        return Sent::NoAddress;
    }
    let addrs: Vec<SocketAddr> = match (address, port).to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(e) => return Sent::Failed(format!("{address}: {e}")),
    };
    let mut last = format!("{address}: no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
            Ok(mut s) => {
                let _ = s.set_write_timeout(Some(CONNECT_TIMEOUT));
                let _ = s.write_all(LINE);
                return Sent::Woken;
            }
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Sent::Failed(last)
}

/// Wakes the agents at `addresses` on `port` from a thread of its own (the controller's pass
/// does not wait on them); a failure is logged at debug level: the agent reads its node
/// within [`FALLBACK_LOOK`] anyway.
pub fn send_all_detached(addresses: Vec<String>, port: u16) {
    if addresses.is_empty() || port == 0 {
        return;
    }
    let spawned = std::thread::Builder::new().name("wake-agents".into()).spawn(move || {
        let t = Instant::now();
        for a in &addresses {
            match send(a, port) {
                Sent::Woken => {}
                other => log::debug!("waking the agent at {a}:{port}: {other:?}"),
            }
        }
        log::debug!("woke {} agents in {:?}", addresses.len(), t.elapsed());
    });
    if let Err(e) = spawned {
        log::warn!("cannot start a thread to wake agents: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_raises_the_flag_once() {
        let l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        assert!(!l.take());
        assert_eq!(send("127.0.0.1", l.local_addr().port()), Sent::Woken);
        let until = Instant::now() + Duration::from_secs(5);
        while !l.pending() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(l.take());
        assert!(!l.take(), "taken: cleared");
    }

    #[test]
    fn a_silent_client_does_not_stop_the_next_wake_up() {
        let l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = l.local_addr().port();
        let _silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        l.take();
        let t = Instant::now();
        assert_eq!(send("127.0.0.1", port), Sent::Woken);
        let until = Instant::now() + Duration::from_secs(5);
        while !l.pending() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(l.take());
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }

    #[test]
    fn nothing_listening_and_no_address_are_failures_not_hangs() {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let t = Instant::now();
        assert!(matches!(send("127.0.0.1", port), Sent::Failed(_)));
        assert_eq!(send("", port), Sent::NoAddress);
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}
