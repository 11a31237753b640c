//! The inside half of `answerNetwork`, run by the pid namespace's init: brings the network
//! namespace's loopback up (one netlink request, built here in safe code), listens on
//! `127.0.0.1:PORT` and forwards each connection to the server's CONNECT proxy through the
//! Unix socket bound at [`PROXY_INSIDE`]. The answerer gets `HTTPS_PROXY` pointing at it;
//! nothing else in the namespace reaches out.

use crate::config::internal::SANDBOX_TUNNELS_MAX;
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Where the proxy's directory is bound in the answerer's root.
pub const PROXY_INSIDE: &str = "/run/peer-proxy";
/// The loopback is the first interface of every new network namespace.
const LOOPBACK_INDEX: i32 = 1;

/// `RTM_NEWLINK` setting `IFF_UP` on the loopback, with an acknowledgement requested.
fn link_up_request() -> Vec<u8> {
    const RTM_NEWLINK: u16 = 16;
    const NLM_F_REQUEST_ACK: u16 = 1 | 4;
    const IFF_UP: u32 = 1;
    let mut m = Vec::with_capacity(32);
    m.extend(32u32.to_ne_bytes());
    m.extend(RTM_NEWLINK.to_ne_bytes());
    m.extend(NLM_F_REQUEST_ACK.to_ne_bytes());
    m.extend(1u32.to_ne_bytes());
    m.extend(0u32.to_ne_bytes());
    m.extend([0u8, 0]);
    m.extend(0u16.to_ne_bytes());
    m.extend(LOOPBACK_INDEX.to_ne_bytes());
    m.extend(IFF_UP.to_ne_bytes());
    m.extend(IFF_UP.to_ne_bytes());
    m
}

fn loopback_up() -> Result<(), String> {
    use nix::sys::socket::{
        AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto,
        socket,
    };
    use std::os::fd::AsRawFd;
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )
    .map_err(|e| format!("netlink: {e}"))?;
    let req = link_up_request();
    sendto(
        fd.as_raw_fd(),
        &req,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )
    .map_err(|e| format!("netlink send: {e}"))?;
    let mut ack = [0u8; 256];
    let n = recv(fd.as_raw_fd(), &mut ack, MsgFlags::empty())
        .map_err(|e| format!("netlink ack: {e}"))?;
    // nlmsghdr (16 bytes), then the error code: 0 is success.
    let code = ack
        .get(16..20)
        .filter(|_| n >= 20)
        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    match code {
        Some(0) => Ok(()),
        other => Err(format!("cannot bring the loopback up: {other:?}")),
    }
}

/// Starts the forwarder; returns the loopback port the answerer's proxy variables name.
pub fn start() -> Result<u16, String> {
    loopback_up()?;
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("forwarder: {e}"))?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("forwarder: {e}"))?
        .port();
    std::thread::spawn(move || accept_loop(listener));
    Ok(port)
}

fn accept_loop(listener: TcpListener) {
    let open = Arc::new(AtomicUsize::new(0));
    let socket = Path::new(PROXY_INSIDE).join(crate::ask::egress::SOCKET_NAME);
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        if open.fetch_add(1, Ordering::SeqCst) >= SANDBOX_TUNNELS_MAX {
            open.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let (open, socket) = (open.clone(), socket.clone());
        std::thread::spawn(move || {
            if let Ok(out) = UnixStream::connect(&socket) {
                crate::ask::egress::splice(conn, out);
            }
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_link_request_is_one_netlink_message() {
        let m = super::link_up_request();
        assert_eq!(m.len(), 32);
        assert_eq!(u32::from_ne_bytes([m[0], m[1], m[2], m[3]]), 32);
    }
}
