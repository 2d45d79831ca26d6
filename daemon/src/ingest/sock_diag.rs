//! The owner (uid) of one TCP socket, asked of the Linux kernel by its exact 4-tuple over
//! netlink `sock_diag` (what `ss -e` reads; no privilege needed). One hashed lookup,
//! whatever the number of sockets on the machine, where reading `/proc/net/tcp` costs a
//! line per socket: the daemon asks it for every loopback connection (`peer`).

use std::net::{IpAddr, SocketAddr};

/// What the kernel said about a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    Uid(u32),
    /// No such socket (it closed, or lives in another network namespace).
    NotFound,
    /// The question could not be asked (no netlink here, an unexpected answer).
    Unavailable,
}

/// `struct inet_diag_sockid` (linux/inet_diag.h): ports and addresses in network order.
#[repr(C)]
#[derive(Clone, Copy)]
struct SockId {
    sport: [u8; 2],
    dport: [u8; 2],
    src: [u8; 16],
    dst: [u8; 16],
    ifindex: u32,
    cookie: [u32; 2],
}

/// `struct nlmsghdr` followed by `struct inet_diag_req_v2`.
#[repr(C)]
struct Request {
    len: u32,
    kind: u16,
    flags: u16,
    seq: u32,
    pid: u32,
    family: u8,
    protocol: u8,
    ext: u8,
    pad: u8,
    states: u32,
    id: SockId,
}

/// `struct inet_diag_msg`, after the netlink header.
#[repr(C)]
#[derive(Clone, Copy)]
struct Message {
    family: u8,
    state: u8,
    timer: u8,
    retrans: u8,
    id: SockId,
    expires: u32,
    rqueue: u32,
    wqueue: u32,
    uid: u32,
    inode: u32,
}

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_HDRLEN: usize = 16;
const INET_DIAG_NOCOOKIE: u32 = !0;

/// The uid owning the TCP socket whose local address is `local` and remote `remote`.
pub(crate) fn owner(local: SocketAddr, remote: SocketAddr) -> Owner {
    let (family, src, dst) = match (local.ip().to_canonical(), remote.ip().to_canonical()) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (libc::AF_INET, v4(a.octets()), v4(b.octets())),
        (IpAddr::V6(a), IpAddr::V6(b)) => (libc::AF_INET6, a.octets(), b.octets()),
        _ => return Owner::Unavailable,
    };
    let req = Request {
        len: std::mem::size_of::<Request>() as u32,
        kind: SOCK_DIAG_BY_FAMILY,
        flags: NLM_F_REQUEST,
        seq: 1,
        pid: 0,
        family: family as u8,
        protocol: libc::IPPROTO_TCP as u8,
        ext: 0,
        pad: 0,
        states: !0,
        id: SockId {
            sport: local.port().to_be_bytes(),
            dport: remote.port().to_be_bytes(),
            src,
            dst,
            ifindex: 0,
            cookie: [INET_DIAG_NOCOOKIE; 2],
        },
    };
    ask(&req).unwrap_or(Owner::Unavailable)
}

fn v4(o: [u8; 4]) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&o);
    b
}

fn ask(req: &Request) -> Option<Owner> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: socket() has no memory preconditions; a valid descriptor is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just returned by socket() and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let wait = libc::timeval {
        tv_sec: 1,
        tv_usec: 0,
    };
    // SAFETY: `wait` is a valid timeval of the stated size for the call's duration.
    let set = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&wait as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if set != 0 {
        return None;
    }
    // SAFETY: an all-zero sockaddr_nl is valid (the kernel as destination).
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: `req` and `kernel` are valid for reads of the sizes given.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            (req as *const Request).cast(),
            std::mem::size_of::<Request>(),
            0,
            (&kernel as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if sent != std::mem::size_of::<Request>() as isize {
        return None;
    }
    let mut buf = [0u8; 4096];
    // SAFETY: `buf` is valid for writes of its length.
    let got = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    let got = usize::try_from(got).ok()?;
    parse(&buf[..got])
}

/// The kernel's answer: one message, the socket's description or an error.
fn parse(answer: &[u8]) -> Option<Owner> {
    if answer.len() < NLMSG_HDRLEN {
        return None;
    }
    let kind = u16::from_ne_bytes([answer[4], answer[5]]);
    let body = &answer[NLMSG_HDRLEN..];
    match kind {
        NLMSG_ERROR => {
            let errno = i32::from_ne_bytes(body.get(..4)?.try_into().ok()?);
            (errno == -libc::ENOENT).then_some(Owner::NotFound)
        }
        SOCK_DIAG_BY_FAMILY if body.len() >= std::mem::size_of::<Message>() => {
            // SAFETY: `body` holds at least one Message (plain integers, any bit pattern
            // is valid); read_unaligned does not need alignment.
            let m: Message = unsafe { std::ptr::read_unaligned(body.as_ptr().cast()) };
            Some(Owner::Uid(m.uid))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_names_the_owner_of_both_ends_and_of_nothing_else() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(server).unwrap();
        let (accepted, remote) = listener.accept().unwrap();
        // SAFETY: getuid has no preconditions.
        let me = Owner::Uid(unsafe { libc::getuid() });
        assert_eq!(owner(client.local_addr().unwrap(), server), me);
        assert_eq!(owner(server, remote), me);
        assert_eq!(
            owner("127.0.0.9:1".parse().unwrap(), server),
            Owner::NotFound
        );
        drop((client, accepted));
        assert_eq!(parse(&[0u8; 8]), None);
    }
}
