//! Helpers shared by the integration tests.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::FromRawFd;

/// A TCP connection to `to` from the address `from` (bound before connecting).
pub fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let sa = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let SocketAddr::V4(to) = to else {
        return Err(std::io::Error::other("IPv4 only"));
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a fresh socket owned by the TcpStream at once; the addresses live across the
    // calls and are of the length given.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let local = sa(from, 0);
        if libc::bind(fd, std::ptr::addr_of!(local).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let remote = sa(*to.ip(), to.port());
        if libc::connect(fd, std::ptr::addr_of!(remote).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stream)
    }
}
