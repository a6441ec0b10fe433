//! One generated request: wire bytes with CAS placeholders, rendered separately per server.
//!
//! Two servers hand out different CAS values for the same item version, so a command that
//! quotes a CAS value (`cas`, meta `C<cas>`) cannot be one byte string. The generator emits
//! [`Piece::Cas`] placeholders naming an item *version* (a sequence number assigned by
//! [`crate::casmap::CasMap`]) and each server's connection renders it with that server's own
//! value. Everything else is literal bytes, identical for both servers.

use crate::casmap::CasMap;

/// Part of a request's wire bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Literal bytes sent unchanged to both servers.
    Bytes(Vec<u8>),
    /// A CAS value, rendered per server.
    Cas(CasRef),
}

/// Which CAS value a placeholder stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CasRef {
    /// The item version with this sequence number (see [`CasMap`]).
    Version(u32),
    /// A literal value no server has handed out (used for "wrong CAS" cases).
    Literal(u64),
}

/// One command of the stream (possibly several lines, e.g. a storage line and its data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// Short name for statistics and reports, e.g. `"set"`, `"mg"`, `"bad-chunk"`.
    pub kind: &'static str,
    /// Wire bytes, in order.
    pub pieces: Vec<Piece>,
    /// How many `MN` lines this command itself produces (a generated `mn`), so the reader
    /// knows the sentinel `MN` from these.
    pub mn_lines: usize,
    /// The key this command addresses, decoded (for associating returned CAS values with
    /// a key when the reply does not name it). `None` for multi-key or keyless commands.
    pub key: Option<Vec<u8>>,
    /// True when the server is expected to close the connection (`quit`, an endless line).
    pub closes: bool,
}

impl Command {
    /// A command made only of literal bytes.
    pub fn literal(kind: &'static str, bytes: Vec<u8>) -> Self {
        Command {
            kind,
            pieces: vec![Piece::Bytes(bytes)],
            mn_lines: 0,
            key: None,
            closes: false,
        }
    }

    /// Appends literal bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        if let Some(Piece::Bytes(last)) = self.pieces.last_mut() {
            last.extend_from_slice(bytes);
        } else {
            self.pieces.push(Piece::Bytes(bytes.to_vec()));
        }
    }

    /// Appends a CAS placeholder.
    pub fn push_cas(&mut self, cas: CasRef) {
        self.pieces.push(Piece::Cas(cas));
    }

    /// The wire bytes for one server, CAS placeholders resolved through that server's map.
    pub fn render(&self, map: &CasMap, out: &mut Vec<u8>) {
        for piece in &self.pieces {
            match piece {
                Piece::Bytes(b) => out.extend_from_slice(b),
                Piece::Cas(CasRef::Literal(v)) => out.extend_from_slice(v.to_string().as_bytes()),
                Piece::Cas(CasRef::Version(id)) => {
                    // A version this server never produced cannot match anything it holds;
                    // render a value far outside any counter (the comparison will already
                    // have flagged the server that lacks it).
                    let v = map.value_of(*id).unwrap_or(u64::MAX - 1);
                    out.extend_from_slice(v.to_string().as_bytes());
                }
            }
        }
    }

    /// Total length in bytes, placeholders counted as 20 (the widest u64).
    pub fn approx_len(&self) -> usize {
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Bytes(b) => b.len(),
                Piece::Cas(_) => 20,
            })
            .sum()
    }
}

/// What is sent in one round trip: some commands followed by the `mn` sentinel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Which of the parallel connections carries it.
    pub conn: usize,
    /// The commands, pipelined in one write.
    pub commands: Vec<Command>,
}

impl Request {
    /// The `MN` lines to read before the reply is complete: the commands' own plus the
    /// sentinel's.
    pub fn expected_mn(&self) -> usize {
        self.commands.iter().map(|c| c.mn_lines).sum::<usize>() + 1
    }

    /// True when the last command makes the server close the connection.
    pub fn closes(&self) -> bool {
        self.commands.iter().any(|c| c.closes)
    }

    /// Wire bytes for one server, sentinel included.
    pub fn render(&self, map: &CasMap) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.commands.iter().map(Command::approx_len).sum());
        for c in &self.commands {
            c.render(map, &mut out);
        }
        out.extend_from_slice(b"mn\r\n");
        out
    }
}
