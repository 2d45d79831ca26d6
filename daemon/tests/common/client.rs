//! A blocking agent-protocol client for the daemon's TCP ingest (`memwatch_wire::ingest`),
//! as the tests drive it: hello, numbered batches, acknowledgements and error messages.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use memwatch_wire::frame::encode_preamble;
use memwatch_wire::ingest::{
    decode_ack, encode_batch_header, encode_hello, ACK_LEN, ACK_MAGIC, ERROR_MAGIC,
};
use memwatch_wire::{encode_record, Record};

/// What the daemon said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Ack(u64, u64),
    Error(String),
    /// The connection ended (or nothing came within the read timeout).
    Closed,
}

/// One ingest connection.
pub struct Client {
    pub sock: TcpStream,
}

/// The bytes of one batch envelope with `records` encoded as frames.
pub fn batch_bytes(stream: u64, seq: u64, run: &str, records: &[Record]) -> Vec<u8> {
    let mut frames = Vec::new();
    for r in records {
        encode_record(r, &mut frames).expect("encodable record");
    }
    let mut b = Vec::new();
    encode_batch_header(stream, seq, run, frames.len() as u32, &mut b);
    b.extend_from_slice(&frames);
    b
}

impl Client {
    /// Connects and sends the hello (token, node name, wire preamble).
    pub fn connect(addr: SocketAddr, token: &str, node: &str) -> std::io::Result<Self> {
        Self::hello_on(TcpStream::connect(addr)?, token, node)
    }

    /// Sends the hello on a connected socket.
    pub fn hello_on(sock: TcpStream, token: &str, node: &str) -> std::io::Result<Self> {
        sock.set_nodelay(true)?;
        sock.set_read_timeout(Some(Duration::from_secs(60)))?;
        let mut hello = Vec::new();
        encode_hello(token, node, &mut hello);
        hello.extend_from_slice(&encode_preamble());
        (&sock).write_all(&hello)?;
        Ok(Self { sock })
    }

    pub fn send(
        &mut self,
        stream: u64,
        seq: u64,
        run: &str,
        records: &[Record],
    ) -> std::io::Result<()> {
        self.sock.write_all(&batch_bytes(stream, seq, run, records))
    }

    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.sock.write_all(bytes)
    }

    /// The next acknowledgement or error.
    pub fn reply(&mut self) -> Reply {
        let mut m = [0u8; 4];
        if self.sock.read_exact(&mut m).is_err() {
            return Reply::Closed;
        }
        if m == ERROR_MAGIC {
            let mut n = [0u8; 2];
            if self.sock.read_exact(&mut n).is_err() {
                return Reply::Closed;
            }
            let mut t = vec![0u8; u16::from_le_bytes(n) as usize];
            if self.sock.read_exact(&mut t).is_err() {
                return Reply::Closed;
            }
            return Reply::Error(String::from_utf8_lossy(&t).into_owned());
        }
        if m != ACK_MAGIC {
            return Reply::Error(format!("unexpected reply magic {m:02x?}"));
        }
        let mut a = [0u8; ACK_LEN];
        a[..4].copy_from_slice(&m);
        if self.sock.read_exact(&mut a[4..]).is_err() {
            return Reply::Closed;
        }
        match decode_ack(&a) {
            Some((s, q)) => Reply::Ack(s, q),
            None => Reply::Error("undecodable acknowledgement".into()),
        }
    }

    /// Replies until the first error or the end of the connection.
    pub fn replies_until_closed(&mut self) -> Vec<Reply> {
        let mut out = Vec::new();
        loop {
            let r = self.reply();
            let last = !matches!(r, Reply::Ack(..));
            out.push(r);
            if last {
                return out;
            }
        }
    }
}
