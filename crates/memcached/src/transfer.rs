//! State transfer (`docs/apps/memcached.md`, "State transfer"): what a replica's snapshot holds
//! ([`Snapshot`]: every item with its value, flags and CAS, the expiry table, the log's time,
//! the server's CAS counter), how the donor reads its server's items ([`read_items`]) and how
//! the receiver writes them back with the same CAS values ([`write_items`]). Memcached 1.6
//! cannot be told an item's CAS: the receiver's server numbers items from its own counter, so
//! the items are stored in CAS order, a scratch key stored as often as it takes to move the
//! counter to just below each item's CAS.

use crate::server::Conn;
use crate::text::{base64_encode, needs_base64, tokens};

/// The first bytes of every snapshot, with its format's version.
const MAGIC: &[u8; 8] = b"MUMEMC01";

/// Look-ups or stores sent in one write before their replies are read.
const COMMANDS_PER_WRITE: usize = 1024;

/// Scratch stores sent in one write (each a few bytes, answered by nothing: quiet).
const SCRATCH_PER_WRITE: usize = 8192;

/// One item of the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub key: Vec<u8>,
    pub flags: u32,
    pub cas: u64,
    pub value: Vec<u8>,
    /// An autovivified item whose win token was given (`mg` answers `Z` for it): restored by
    /// autovivifying it again, which a store would not do.
    pub won: bool,
}

/// The bit of an item's flags word that says it was won (client flags are 32 bits).
const WON_BIT: u64 = 1 << 32;

/// A replica's state between two entries applied.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The latest entry's time.
    pub now_ms: u64,
    /// The last CAS value the server gave.
    pub cas_counter: u64,
    /// The expiry table: each key with an expiry, in ms since the Unix epoch.
    pub expiries: Vec<(Vec<u8>, u64)>,
    pub items: Vec<Item>,
}

impl Snapshot {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(MAGIC);
        for word in [self.now_ms, self.cas_counter, self.expiries.len() as u64] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        for (key, at_ms) in &self.expiries {
            put_bytes(out, key);
            out.extend_from_slice(&at_ms.to_le_bytes());
        }
        out.extend_from_slice(&(self.items.len() as u64).to_le_bytes());
        for item in &self.items {
            put_bytes(out, &item.key);
            let won = if item.won { WON_BIT } else { 0 };
            out.extend_from_slice(&(u64::from(item.flags) | won).to_le_bytes());
            out.extend_from_slice(&item.cas.to_le_bytes());
            put_bytes(out, &item.value);
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<Snapshot, String> {
        let mut r =
            Reader(bytes.strip_prefix(MAGIC).ok_or("a memcached snapshot of another format")?);
        let (now_ms, cas_counter) = (r.word()?, r.word()?);
        let mut expiries = Vec::new();
        for _ in 0..r.count()? {
            expiries.push((r.bytes()?.to_vec(), r.word()?));
        }
        let mut items = Vec::new();
        for _ in 0..r.count()? {
            let key = r.bytes()?.to_vec();
            let word = r.word()?;
            let flags =
                u32::try_from(word & !WON_BIT).map_err(|_| "an item's flags past 32 bits")?;
            let (cas, value) = (r.word()?, r.bytes()?.to_vec());
            items.push(Item { key, flags, cas, value, won: word & WON_BIT != 0 });
        }
        if !r.0.is_empty() {
            return Err("a memcached snapshot with bytes after its items".into());
        }
        Ok(Snapshot { now_ms, cas_counter, expiries, items })
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Reads a snapshot's fields, each cut short an error.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn word(&mut self) -> Result<u64, String> {
        let (word, rest) = self.0.split_first_chunk::<8>().ok_or("a cut memcached snapshot")?;
        self.0 = rest;
        Ok(u64::from_le_bytes(*word))
    }

    /// A count of entries, each at least 8 bytes: no more than the bytes left could hold.
    fn count(&mut self) -> Result<usize, String> {
        let n = self.word()?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.0.len() / 8)
            .ok_or_else(|| format!("a memcached snapshot counting {n} entries"))
    }

    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let len = self.word()?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&n| n <= self.0.len())
            .ok_or("a cut memcached snapshot")?;
        let (bytes, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(bytes)
    }
}

/// The key of a `lru_crawler metadump` line (`key=<URL-encoded> exp=… cas=…`), as bytes.
pub fn metadump_key(line: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(crate::text::line(line)).ok()?;
    text.strip_prefix("key=").and_then(|l| l.split(' ').next()).map(url_decoded)
}

/// A key as `lru_crawler metadump` prints it (URL-encoded), as bytes; a malformed escape is
/// kept as it is.
pub fn url_decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%' && i + 2 < bytes.len())
            .then(|| std::str::from_utf8(&bytes[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}

/// `mg <key> v f c` (the key in base64 where it must be): the item, if present.
fn read_command(key: &[u8], out: &mut Vec<u8>) {
    meta_command(b"mg", key, b"", b"v f c", out);
}

/// The item of `key` in the reply to [`read_command`] (`VA <n> f<flags> c<cas>` and its data
/// block), `Ok(None)` for `EN`.
pub fn read_reply(key: &[u8], unit: &[u8]) -> Result<Option<Item>, String> {
    let header_bytes = unit.iter().position(|&b| b == b'\n').map_or(unit.len(), |n| n + 1);
    let tokens = tokens(crate::text::line(unit));
    let bad =
        || format!("memcached answered a snapshot's read with {:?}", String::from_utf8_lossy(unit));
    match tokens.first().copied() {
        Some(b"EN") => return Ok(None),
        Some(b"VA") => {}
        _ => return Err(bad()),
    }
    let flag = |letter: u8| tokens.iter().skip(2).find_map(|t| t.strip_prefix(&[letter]));
    let number = |t: &[u8]| std::str::from_utf8(t).ok()?.parse::<u64>().ok();
    let flags = flag(b'f').and_then(number).and_then(|f| u32::try_from(f).ok()).ok_or_else(bad)?;
    let cas = flag(b'c').and_then(number).ok_or_else(bad)?;
    let len = tokens.get(1).and_then(|t| number(t)).ok_or_else(bad)? as usize;
    let value = unit.get(header_bytes..header_bytes + len).ok_or_else(bad)?.to_vec();
    let won = tokens.iter().skip(2).any(|t| *t == b"Z");
    Ok(Some(Item { key: key.to_vec(), flags, cas, value, won }))
}

/// `<command> <key> [<args>] [b] [<flags>]\r\n`, one space between tokens: the key in base64,
/// with the `b` flag first among the flags, where the text protocol cannot carry it.
pub(crate) fn meta_command(
    command: &[u8],
    key: &[u8],
    args: &[u8],
    flags: &[u8],
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(command);
    out.push(b' ');
    let base64 = needs_base64(key);
    match base64 {
        true => out.extend_from_slice(&base64_encode(key)),
        false => out.extend_from_slice(key),
    }
    let b_flag: &[u8] = if base64 { b"b" } else { b"" };
    for part in [args, b_flag, flags].into_iter().filter(|p| !p.is_empty()) {
        out.push(b' ');
        out.extend_from_slice(part);
    }
    out.extend_from_slice(b"\r\n");
}

/// Every key the server holds (expired and flushed items left out: the servers never expire
/// anything themselves, and a flushed item is gone to every client).
pub fn read_keys(conn: &mut Conn) -> Result<Vec<Vec<u8>>, String> {
    for _ in 0..100 {
        conn.send(b"lru_crawler metadump all\r\n")?;
        let first = conn.unit()?;
        if first.starts_with(b"BUSY") {
            // Another crawl under way (none of this replica's: a test's comparison, say).
            std::thread::sleep(std::time::Duration::from_millis(20));
            continue;
        }
        let mut keys = Vec::new();
        let mut line = first;
        while line != b"END\r\n" {
            keys.push(metadump_key(&line).ok_or_else(|| {
                format!("memcached's metadump sent {:?}", String::from_utf8_lossy(&line))
            })?);
            line = conn.unit()?;
        }
        return Ok(keys);
    }
    Err("memcached's crawler stayed busy".into())
}

/// Every item the server holds, with its value, flags and CAS.
pub fn read_items(conn: &mut Conn) -> Result<Vec<Item>, String> {
    let keys = read_keys(conn)?;
    let mut items = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(COMMANDS_PER_WRITE) {
        let mut out = Vec::new();
        for key in chunk {
            read_command(key, &mut out);
        }
        let units = conn.call(&out)?;
        if units.len() != chunk.len() {
            return Err(format!("{} reads answered with {} replies", chunk.len(), units.len()));
        }
        for (key, unit) in chunk.iter().zip(&units) {
            items.extend(read_reply(key, unit)?);
        }
    }
    Ok(items)
}

/// Stores `items` into a server whose CAS counter stands at `counter` (it gave no item a CAS
/// above it), each with its own CAS, then moves the counter to `target`: in CAS order, a
/// scratch key (one no item has) stored to move the counter to just below each item's CAS,
/// and deleted at the end. `Err` if the counter is past an item's CAS or `target` already.
pub fn write_items(
    conn: &mut Conn,
    items: &mut [Item],
    counter: u64,
    target: u64,
) -> Result<(), String> {
    items.sort_by_key(|i| i.cas);
    let scratch = scratch_key(items);
    let mut at = counter;
    let mut out = Vec::new();
    for item in items.iter() {
        if item.cas <= at {
            return Err(format!(
                "an item's CAS {} is not above this server's counter {at}: restart this \
                 replica (with --rejoin) so that its memcached starts afresh",
                item.cas
            ));
        }
        at = advance(conn, &mut out, &scratch, at, item.cas - 1)?;
        if item.won {
            vivify(conn, &mut out, item)?;
        } else {
            let len = item.value.len().to_string();
            let flags = format!("F{} q", item.flags);
            meta_command(b"ms", &item.key, len.as_bytes(), flags.as_bytes(), &mut out);
            out.extend_from_slice(&item.value);
            out.extend_from_slice(b"\r\n");
        }
        at += 1;
        if out.len() > 64 << 10 {
            send_quiet(conn, &mut out)?;
        }
    }
    if target < at {
        return Err(format!("the snapshot's CAS counter {target} is below its items' ({at})"));
    }
    advance(conn, &mut out, &scratch, at, target)?;
    meta_command(b"md", &scratch, b"", b"q", &mut out);
    send_quiet(conn, &mut out)
}

/// Autovivifies `item` (an empty item, its win token given), after the commands in `out`.
fn vivify(conn: &mut Conn, out: &mut Vec<u8>, item: &Item) -> Result<(), String> {
    if !item.value.is_empty() || item.flags != 0 {
        return Err("an autovivified item with a value or flags".into());
    }
    send_quiet(conn, out)?;
    meta_command(b"mg", &item.key, b"", b"N0", out);
    let units = conn.call(out)?;
    out.clear();
    match &units[..] {
        [unit] if unit.starts_with(b"EN") || unit.starts_with(b"HD") => Ok(()),
        _ => Err(format!("memcached answered an autovivify with {units:?}")),
    }
}

/// Stores the scratch key until the counter moves from `at` to `to`.
fn advance(
    conn: &mut Conn,
    out: &mut Vec<u8>,
    scratch: &[u8],
    at: u64,
    to: u64,
) -> Result<u64, String> {
    let mut at = at;
    while at < to {
        let n = (to - at).min(SCRATCH_PER_WRITE as u64);
        for _ in 0..n {
            meta_command(b"ms", scratch, b"0", b"q", out);
            out.extend_from_slice(b"\r\n");
        }
        at += n;
        send_quiet(conn, out)?;
    }
    Ok(at)
}

/// Sends quiet commands: they answer only if they fail, and any answer is an error.
fn send_quiet(conn: &mut Conn, out: &mut Vec<u8>) -> Result<(), String> {
    let units = conn.call(out)?;
    out.clear();
    match units.first() {
        None => Ok(()),
        Some(unit) => Err(format!(
            "memcached refused a restored item: {:?}",
            String::from_utf8_lossy(unit).trim_end()
        )),
    }
}

/// A key no item has, for the stores that move the CAS counter.
fn scratch_key(items: &[Item]) -> Vec<u8> {
    let taken: std::collections::HashSet<&[u8]> = items.iter().map(|i| &i.key[..]).collect();
    (0u64..)
        .map(|n| format!("mu-cas-scratch-{n}").into_bytes())
        .find(|k| !taken.contains(&k[..]))
        .expect("a free key among the first few")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(key: &[u8], cas: u64) -> Item {
        Item { key: key.to_vec(), flags: 7, cas, value: b"v\r\nx".to_vec(), won: false }
    }

    #[test]
    fn snapshots_round_trip_and_cut_ones_are_refused() {
        let s = Snapshot {
            now_ms: 1234,
            cas_counter: 99,
            expiries: vec![(b"a".to_vec(), 5000)],
            items: vec![
                item(b"a", 3),
                item(b"\xffbin", 98),
                Item { flags: 0, value: Vec::new(), won: true, ..item(b"viv", 99) },
            ],
        };
        let mut bytes = Vec::new();
        s.encode(&mut bytes);
        assert_eq!(Snapshot::decode(&bytes), Ok(s));
        for cut in 0..bytes.len() {
            assert!(Snapshot::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        bytes.push(0);
        assert!(Snapshot::decode(&bytes).is_err(), "a byte too many");
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&[0; 16]);
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(Snapshot::decode(&huge).unwrap_err().contains("counting"));
    }

    #[test]
    fn metadump_lines_and_read_replies_are_parsed() {
        let line = b"key=a%20b%ff exp=-1 la=1 cas=5 fetch=no cls=1 size=64\n";
        assert_eq!(metadump_key(line), Some(b"a b\xff".to_vec()));
        assert_eq!(metadump_key(b"END\r\n"), None);
        assert_eq!(url_decoded("50%"), b"50%");
        assert_eq!(url_decoded("a%20b%2Fc"), b"a b/c");
        assert_eq!(url_decoded("bad%zz"), b"bad%zz");
        let got = read_reply(b"k", b"VA 4 f7 c12\r\nv\r\nx\r\n").unwrap();
        assert_eq!(got, Some(Item { cas: 12, ..item(b"k", 0) }));
        assert_eq!(read_reply(b"k", b"EN\r\n"), Ok(None));
        let won = read_reply(b"k", b"VA 0 f0 c3 Z\r\n\r\n").unwrap().unwrap();
        assert!(won.won && won.value.is_empty() && won.cas == 3);
        assert!(read_reply(b"k", b"VA 4 f7\r\nv\r\nx\r\n").is_err(), "no CAS");
        assert!(read_reply(b"k", b"VA 9 f7 c1\r\nv\r\n").is_err(), "a cut value");
        assert!(read_reply(b"k", b"SERVER_ERROR x\r\n").is_err());
        let mut out = Vec::new();
        read_command(b"a b", &mut out);
        assert_eq!(out, b"mg YSBi b v f c\r\n");
        out.clear();
        meta_command(b"ms", b"a b", b"3", b"F5 q", &mut out);
        meta_command(b"ms", b"k", b"0", b"q", &mut out);
        meta_command(b"md", b"k", b"", b"q", &mut out);
        meta_command(b"md", b"a b", b"", b"", &mut out);
        meta_command(b"md", b"k", b"", b"", &mut out);
        let want = "ms YSBi 3 b F5 q\r\nms k 0 q\r\nmd k q\r\nmd YSBi b\r\nmd k\r\n";
        assert_eq!(String::from_utf8_lossy(&out), want);
    }

    #[test]
    fn the_scratch_key_is_no_items() {
        assert_eq!(scratch_key(&[item(b"x", 1)]), b"mu-cas-scratch-0");
        let taken = [item(b"mu-cas-scratch-0", 1), item(b"mu-cas-scratch-1", 2)];
        assert_eq!(scratch_key(&taken), b"mu-cas-scratch-2");
    }
}
