//! Who is on the other end of a connection (a **peer**): the unit the daemon's per-client
//! limits and turns are counted in (connections per peer, the writer's turns, the peer's
//! share of the received-data budget).
//!
//! One definition, used by the TCP ingest and the HTTP listeners: a peer is the client's
//! IP address; for a loopback connection also the user owning the client's socket, so
//! two users of one machine are two peers, and so are two loopback source addresses
//! (127.0.0.2 is not 127.0.0.1). The owner is the client socket's uid, found by the
//! connection's two addresses: asked of the kernel (`sock_diag`), or where that cannot be
//! asked, read from `/proc/net/tcp` and `/proc/net/tcp6`. When the client's socket is not
//! found (another network namespace, a socket already closed, not Linux), the address
//! alone is the peer.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A client of the daemon, by address and, on loopback, user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Peer {
    pub ip: IpAddr,
    /// The uid owning the client's socket (loopback connections only, when found).
    pub uid: Option<u32>,
}

impl Peer {
    /// The peer of a connection from `remote` accepted on `local`.
    pub fn of(remote: SocketAddr, local: SocketAddr) -> Peer {
        let ip = remote.ip().to_canonical();
        let uid = if ip.is_loopback() {
            socket_owner(remote, local)
        } else {
            None
        };
        Peer { ip, uid }
    }

    /// The peer of requests that did not come through a listener (in-process callers).
    pub const LOCAL: Peer = Peer {
        ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        uid: None,
    };
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.uid {
            Some(uid) => write!(f, "{} (uid {uid})", self.ip),
            None => write!(f, "{}", self.ip),
        }
    }
}

/// The uid owning the client's end of the connection `client` → `server`: the socket whose
/// local address is `client` and remote address `server`.
fn socket_owner(client: SocketAddr, server: SocketAddr) -> Option<u32> {
    #[cfg(target_os = "linux")]
    match super::sock_diag::owner(client, server) {
        super::sock_diag::Owner::Uid(uid) => return Some(uid),
        super::sock_diag::Owner::NotFound => return None,
        super::sock_diag::Owner::Unavailable => {}
    }
    proc_owner(client, server)
}

/// [`socket_owner`] from `/proc/net/tcp{,6}` (a line per socket of the machine).
fn proc_owner(client: SocketAddr, server: SocketAddr) -> Option<u32> {
    let want = (canonical(client), canonical(server));
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().find_map(|path| {
        let table = std::fs::read_to_string(path).ok()?;
        table.lines().skip(1).find_map(|line| {
            let row = parse_row(line)?;
            ((row.local, row.remote) == want).then_some(row.uid)
        })
    })
}

fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// One socket of `/proc/net/tcp{,6}`.
#[derive(Debug, PartialEq, Eq)]
struct Row {
    local: SocketAddr,
    remote: SocketAddr,
    uid: u32,
}

/// TCP states in the table that can be one end of an open connection (established, or
/// closing on one side); time-wait sockets have no owner.
fn is_connected(state: u8) -> bool {
    matches!(state, 0x01 | 0x04 | 0x05 | 0x08 | 0x09 | 0x0B)
}

/// A line of the table: `sl local rem st tx:rx tr:when retrnsmt uid ...`, addresses as
/// hexadecimal 32-bit words in the kernel's byte order, ports in hexadecimal.
fn parse_row(line: &str) -> Option<Row> {
    let mut f = line.split_whitespace();
    let _slot = f.next()?;
    let local = parse_addr(f.next()?)?;
    let remote = parse_addr(f.next()?)?;
    let state = u8::from_str_radix(f.next()?, 16).ok()?;
    if !is_connected(state) {
        return None;
    }
    let uid = f.nth(3)?.parse().ok()?;
    Some(Row { local, remote, uid })
}

fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let w = ip.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(w, 16).ok()?.to_ne_bytes())
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip.to_canonical(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_parse_in_the_kernel_byte_order() {
        let v4 = "   1: 0200007F:B244 0100007F:1CCE 01 00000000:00000000 00:00000000 \
                  00000000  1234        0 1671471 1 0000000000000000 20 4 1 40 146";
        let le = cfg!(target_endian = "little");
        let row = parse_row(v4).unwrap();
        if le {
            assert_eq!(row.local, "127.0.0.2:45636".parse().unwrap());
            assert_eq!(row.remote, "127.0.0.1:7374".parse().unwrap());
        }
        assert_eq!(row.uid, 1234);
        // ::ffff:127.0.0.3 port 80 (a v4 client of a v6 listener) and ::1.
        let v6 = "   0: 0000000000000000FFFF00000300007F:0050 \
                  00000000000000000000000001000000:1CCE 01 00000000:00000000 \
                  00:00000000 00000000     7        0 1 1 0 20 4 1 40 146";
        let row = parse_row(v6).unwrap();
        if le {
            assert_eq!(row.local, "127.0.0.3:80".parse().unwrap());
            assert_eq!(row.remote, "[::1]:7374".parse().unwrap());
        }
        assert_eq!(row.uid, 7);
        // Listening and time-wait sockets are nobody's connection; garbage is no row.
        assert!(parse_row(&v4.replace(" 01 ", " 0A ")).is_none());
        assert!(parse_row(&v4.replace(" 01 ", " 06 ")).is_none());
        assert!(parse_row("  sl  local_address rem_address   st").is_none());
        assert!(parse_row("0: 0100007F 0100007F:0001 01 0 0 0 5").is_none());
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_loopback_client_is_its_address_and_user_and_others_are_their_address() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        // SAFETY: getuid has no preconditions.
        let me = Some(unsafe { libc::getuid() });
        for from in ["127.0.0.1", "127.0.0.2"] {
            let sock = socket2_bind_connect(from, server);
            let (_accepted, remote) = listener.accept().unwrap();
            let peer = Peer::of(remote, server);
            assert_eq!(peer.ip, from.parse::<IpAddr>().unwrap());
            assert_eq!(peer.uid, me, "{from}");
            // The fallback reads the same owner.
            assert_eq!(proc_owner(remote, server), me, "{from}");
            drop(sock);
        }
        // Not loopback: the address alone, however the table looks.
        let far = Peer::of("192.0.2.7:5000".parse().unwrap(), server);
        assert_eq!(
            far,
            Peer {
                ip: "192.0.2.7".parse().unwrap(),
                uid: None
            }
        );
        // No such socket: the address alone.
        let gone = Peer::of("127.0.0.9:1".parse().unwrap(), server);
        assert_eq!(gone.uid, None);
    }

    /// A client socket bound to `from` (any port), connected to `to`.
    fn socket2_bind_connect(from: &str, to: SocketAddr) -> std::net::TcpStream {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let s = tokio::net::TcpSocket::new_v4().unwrap();
            s.bind(SocketAddr::new(from.parse().unwrap(), 0)).unwrap();
            s.connect(to).await.unwrap().into_std().unwrap()
        })
    }
}
