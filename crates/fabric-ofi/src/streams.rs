//! The TCP streams this process holds, as the kernel lists them: the provider opens and accepts
//! its connections itself and says nothing of them, but each is a socket of this process, so
//! `/proc` tells which exist and who opened them (an opened stream's remote end is the peer's
//! listening port; an accepted one's local end is ours).
//!
//! The backend uses this to keep the rule that a pair of nodes holds one stream, which the
//! lower node opens (see `Node::enforce_opener`): the higher node finds any stream it opened to
//! a lower one and shuts it down, and the lower node any second stream it opened ([`Opener`]
//! says when the process's count is one node's).

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::RawFd;
use std::sync::{Mutex, MutexGuard};

/// A TCP socket of this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stream {
    pub fd: RawFd,
    /// The socket's inode: names it for as long as it exists, unlike its descriptor.
    pub inode: u64,
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
    /// Still connecting: no byte has gone either way on it.
    pub connecting: bool,
}

/// TCP states, as the kernel numbers them in `/proc/net/tcp`, that never carry a peer's bytes
/// again (or never did): listening, closed, and waiting out the end.
const LISTEN: u8 = 0x0a;
const CLOSE: u8 = 0x07;
const TIME_WAIT: u8 = 0x06;
/// A connection asked for and not yet answered.
const SYN_SENT: u8 = 0x02;

/// One `/proc/net/tcp` address (`0100007F:4E20`): the IPv4 address as the kernel's native word
/// of the network-order bytes, then the port.
fn parse_addr(field: &str) -> Option<SocketAddrV4> {
    let (ip, port) = field.split_once(':')?;
    let ip = u32::from_str_radix(ip, 16).ok()?;
    let port = u16::from_str_radix(port, 16).ok()?;
    Some(SocketAddrV4::new(Ipv4Addr::from(ip.to_ne_bytes()), port))
}

/// Lines of `/proc/net/tcp` with a live stream: (local, remote, socket inode, state).
fn parse_table(table: &str) -> Vec<(SocketAddrV4, SocketAddrV4, u64, u8)> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let state = u8::from_str_radix(f.get(3)?, 16).ok()?;
            if matches!(state, LISTEN | CLOSE | TIME_WAIT) {
                return None;
            }
            Some((parse_addr(f.get(1)?)?, parse_addr(f.get(2)?)?, f.get(9)?.parse().ok()?, state))
        })
        .collect()
}

/// The IPv4 TCP streams this process holds (connecting, established or closing).
///
/// From the kernel's table, which lists every socket of the network namespace and is read in
/// pieces: a row can be missed while sockets elsewhere come and go. So each socket of this
/// process the table did not list is asked directly ([`ask_socket`]); only one still
/// connecting is then left out (its peer is not known yet, and it carried nothing).
pub fn held() -> std::io::Result<Vec<Stream>> {
    let inodes = socket_descriptors()?;
    let table = std::fs::read_to_string("/proc/self/net/tcp")?;
    let mut streams: Vec<Stream> = parse_table(&table)
        .into_iter()
        .filter_map(|(local, remote, inode, state)| {
            let connecting = state == SYN_SENT;
            inodes.get(&inode).map(|&fd| Stream { fd, inode, local, remote, connecting })
        })
        .collect();
    let listed: std::collections::HashSet<u64> = streams.iter().map(|s| s.inode).collect();
    for (&inode, &fd) in &inodes {
        if !listed.contains(&inode) {
            streams.extend(ask_socket(fd, inode));
        }
    }
    Ok(streams)
}

/// Socket `fd` as a stream, asked of the socket itself: `None` unless it is still the socket
/// `inode` names, an IPv4 TCP stream that may carry bytes (not listening, closed or waiting
/// out the end), with a peer (not still connecting).
fn ask_socket(fd: RawFd, inode: u64) -> Option<Stream> {
    // SAFETY: `stat` is plain data, for which all zeroes is a value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one `stat` into the local we pass; `fd` is a number, and if it was
    // closed (or reused) since it was listed the inode check says so.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_ino != inode {
        return None;
    }
    // SAFETY: `tcp_info` is plain data, for which all zeroes is a value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the local `info`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 || len < 1 || matches!(info.tcpi_state, LISTEN | CLOSE | TIME_WAIT | SYN_SENT) {
        return None;
    }
    let address = |peer: bool| -> Option<SocketAddrV4> {
        // SAFETY: `sockaddr_in` is plain data, for which all zeroes is a value.
        let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let at = (&mut addr as *mut libc::sockaddr_in).cast();
        // SAFETY: getsockname and getpeername write at most `len` bytes into the local `addr`;
        // its family is checked before its fields are read.
        let rc = unsafe {
            if peer {
                libc::getpeername(fd, at, &mut len)
            } else {
                libc::getsockname(fd, at, &mut len)
            }
        };
        (rc == 0 && addr.sin_family == libc::AF_INET as libc::sa_family_t).then(|| {
            let ip = Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr));
            SocketAddrV4::new(ip, u16::from_be(addr.sin_port))
        })
    };
    Some(Stream { fd, inode, local: address(false)?, remote: address(true)?, connecting: false })
}

/// The streams this process opened to `peer` (a peer's listening address).
pub fn opened_to(peer: SocketAddrV4) -> std::io::Result<Vec<Stream>> {
    Ok(held()?.into_iter().filter(|s| s.remote == peer).collect())
}

/// The streams this process holds with the node listening at `peer`: those opened to it, and
/// those accepted on `local_port` from its address (which may include another node's on the
/// same address).
pub fn with_peer(local_port: u16, peer: SocketAddrV4) -> std::io::Result<Vec<Stream>> {
    Ok(held()?
        .into_iter()
        .filter(|s| {
            s.remote == peer || (s.local.port() == local_port && s.remote.ip() == peer.ip())
        })
        .collect())
}

/// Where a peer listens: its IPv4 address as text (its host name where that does not resolve to
/// one), and its base port.
type PeerKey = (String, u16);

/// How many live nodes of this process may open streams to each peer (those lower than it),
/// by where the peer listens. A count of the streams this process opened to a peer says what
/// one node opened only where a single node of the process may open any: one replica per
/// process, and the conformance harness's pairs, but not its nodes that share a process with
/// a lower one talking to the same peer.
static OPENERS: Mutex<BTreeMap<PeerKey, usize>> = Mutex::new(BTreeMap::new());

fn openers() -> MutexGuard<'static, BTreeMap<PeerKey, usize>> {
    // The map holds plain counts, each updated in one step: a panic elsewhere while the lock
    // was held leaves nothing half done.
    OPENERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A live node's place in this process's count of openers, given up when dropped.
#[derive(Debug)]
pub struct Opener {
    peers: Vec<PeerKey>,
}

impl Opener {
    /// Counts a node that may open streams to `peers` (where each listens), until dropped.
    pub fn count(peers: impl IntoIterator<Item = (String, u16)>) -> Opener {
        let peers: Vec<PeerKey> = peers.into_iter().collect();
        let mut map = openers();
        for peer in &peers {
            *map.entry(peer.clone()).or_insert(0) += 1;
        }
        Opener { peers }
    }

    /// Whether this node is the only live node of the process that may open streams to the
    /// peer listening at (`host`, `base_port`), so that every stream the process opened to it
    /// is this node's.
    pub fn sole_opener_of(&self, host: &str, base_port: u16) -> bool {
        let key = (host.to_string(), base_port);
        self.peers.contains(&key) && openers().get(&key) == Some(&1)
    }
}

impl Drop for Opener {
    fn drop(&mut self) {
        let mut map = openers();
        for peer in &self.peers {
            if let Some(n) = map.get_mut(peer) {
                *n -= 1;
                if *n == 0 {
                    map.remove(peer);
                }
            }
        }
    }
}

/// How long data sent on `stream` may go unacknowledged before the kernel gives the connection
/// up (`TCP_USER_TIMEOUT`); 0 restores the default (`net.ipv4.tcp_retries2` retransmissions).
pub fn set_unacknowledged_limit(stream: &Stream, ms: u32) -> std::io::Result<()> {
    if !still_held(stream) {
        return Ok(());
    }
    // SAFETY: setsockopt reads `size_of::<u32>()` bytes from a live local; the descriptor caveat
    // is `shut_down`'s (a reused descriptor gets a timeout that only ever breaks a connection).
    let rc = unsafe {
        libc::setsockopt(
            stream.fd,
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&ms as *const u32).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether `stream`'s descriptor still names the socket `held` listed: the provider may have
/// closed it since, and the number may name another file by now.
fn still_held(stream: &Stream) -> bool {
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes one `stat` into the space given and reads nothing else; a closed
    // descriptor is an error, not undefined behaviour.
    let rc = unsafe { libc::fstat(stream.fd, stat.as_mut_ptr()) };
    // SAFETY: fstat returned 0, so it filled the whole `stat`.
    rc == 0 && unsafe { stat.assume_init() }.st_ino == stream.inode
}

/// The socket inodes this process still has descriptors for. A stream can leave the kernel's
/// table while its descriptor is open, with bytes still to be read: once both ends have sent
/// their end, it waits out the end apart from its socket. Only its descriptor's close says that
/// its owner read everything on it.
pub fn open_sockets() -> std::io::Result<std::collections::HashSet<u64>> {
    Ok(socket_descriptors()?.into_keys().collect())
}

/// This process's sockets: each one's inode, and a descriptor of it.
fn socket_descriptors() -> std::io::Result<HashMap<u64, RawFd>> {
    let mut inodes = HashMap::new();
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let Ok(entry) = entry else { continue };
        let Ok(target) = std::fs::read_link(entry.path()) else { continue };
        let target = target.to_string_lossy();
        let Some(inode) = target.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) else {
            continue;
        };
        if let (Ok(inode), Ok(fd)) =
            (inode.parse::<u64>(), entry.file_name().to_string_lossy().parse::<RawFd>())
        {
            inodes.insert(inode, fd);
        }
    }
    Ok(inodes)
}

/// Shuts `stream` down in both directions, leaving the descriptor to its owner (the provider),
/// which reads end-of-file and drops the connection as if the peer had closed it. A stream
/// whose descriptor no longer names it (closed since it was listed) is down already.
pub fn shut_down(stream: &Stream) -> std::io::Result<()> {
    if !still_held(stream) {
        return Ok(());
    }
    // SAFETY: shutdown takes a descriptor and a flag, no memory. The descriptor named the
    // stream's socket just above; were it closed and reused in between (a window of a system
    // call), this would shut that socket instead, which only ever breaks a connection (an
    // error, never a false success).
    if unsafe { libc::shutdown(stream.fd, libc::SHUT_RDWR) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// A stream asked of its socket reads as the kernel's table lists it; a listener, another
    /// socket's inode, and a socket that is not TCP are no streams.
    #[test]
    fn a_socket_asked_directly_reads_as_the_table_lists_it() {
        use std::os::fd::AsRawFd;
        let _turn = crate::SOCKET_TABLE_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(at) = listener.local_addr().unwrap() else { panic!() };
        let opened = TcpStream::connect(at).unwrap();
        let _accepted = listener.accept().unwrap();
        let listed = opened_to(at).unwrap();
        assert_eq!(listed.len(), 1);
        let asked = ask_socket(opened.as_raw_fd(), listed[0].inode).expect("a stream");
        assert_eq!(asked, listed[0]);
        assert_eq!(ask_socket(opened.as_raw_fd(), listed[0].inode + 1), None, "another inode");
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let inodes = socket_descriptors().unwrap();
        let inode_of = |fd: RawFd| inodes.iter().find(|(_, &f)| f == fd).map(|(&i, _)| i).unwrap();
        assert_eq!(ask_socket(listener.as_raw_fd(), inode_of(listener.as_raw_fd())), None);
        assert_eq!(ask_socket(udp.as_raw_fd(), inode_of(udp.as_raw_fd())), None);
    }

    #[test]
    fn parses_the_kernel_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:4E20 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0\n\
   1: 0100007F:D431 0100007F:4E20 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1\n\
   2: 0A63000A:4E20 0163000A:9C40 06 00000000:00000000 03:00000E33 00000000     0        0 0 3\n";
        let rows = parse_table(table);
        let localhost = |port| SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
        assert_eq!(rows, vec![(localhost(0xd431), localhost(0x4e20), 222, 1)]);
    }

    #[test]
    fn a_closed_stream_is_left_alone_even_where_its_number_was_reused() {
        let _turn = crate::SOCKET_TABLE_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        use std::io::{Read, Write};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(at) = listener.local_addr().unwrap() else { panic!() };
        let first = TcpStream::connect(at).unwrap();
        let _first_accepted = listener.accept().unwrap();
        let listed = opened_to(at).unwrap();
        assert_eq!(listed.len(), 1);
        assert!(open_sockets().unwrap().contains(&listed[0].inode));
        drop(first);
        assert!(!open_sockets().unwrap().contains(&listed[0].inode), "its descriptor is gone");
        // The lowest free number is the one just freed: the new stream most likely takes it.
        let mut second = TcpStream::connect(at).unwrap();
        let (mut second_accepted, _) = listener.accept().unwrap();
        shut_down(&listed[0]).expect("a stream closed since it was listed is down already");
        set_unacknowledged_limit(&listed[0], 1).unwrap();
        second.write_all(b"x").expect("the stream that took the number is untouched");
        let mut byte = [0u8; 1];
        second_accepted.read_exact(&mut byte).unwrap();
        assert_eq!(&byte, b"x");
    }

    #[test]
    fn counts_the_nodes_that_may_open_streams_to_a_peer() {
        // A port no other test of this binary names.
        let peer = || ("192.0.2.7".to_string(), 17_001);
        let first = Opener::count([peer(), ("192.0.2.7".to_string(), 17_011)]);
        assert!(first.sole_opener_of("192.0.2.7", 17_001));
        assert!(!first.sole_opener_of("192.0.2.7", 17_021), "not one of its peers");
        let second = Opener::count([peer()]);
        assert!(!first.sole_opener_of("192.0.2.7", 17_001), "two nodes may open to it");
        assert!(!second.sole_opener_of("192.0.2.7", 17_001));
        assert!(first.sole_opener_of("192.0.2.7", 17_011), "only the first opens to that one");
        drop(first);
        assert!(second.sole_opener_of("192.0.2.7", 17_001), "the first one is gone");
        drop(second);
        assert!(!openers().contains_key(&peer()), "nothing is left counted");
    }

    #[test]
    fn finds_and_shuts_down_a_stream_this_process_opened() {
        let _turn = crate::SOCKET_TABLE_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(at) = listener.local_addr().unwrap() else { panic!() };
        let mut client = TcpStream::connect(at).unwrap();
        let (mut accepted, _) = listener.accept().unwrap();
        let opened = opened_to(at).unwrap();
        assert_eq!(opened.len(), 1, "{opened:?}");
        use std::os::fd::AsRawFd;
        assert_eq!(opened[0].fd, client.as_raw_fd());
        // The accepted end is held too, but it was not opened to `at`.
        assert!(held().unwrap().iter().any(|s| s.fd == accepted.as_raw_fd() && s.local == at));
        let both = with_peer(0, at).unwrap();
        assert_eq!(both.len(), 1, "opened to `at`; nothing accepted on port 0: {both:?}");
        let accepted_here = with_peer(at.port(), at).unwrap();
        assert_eq!(accepted_here.len(), 2, "and the accepted end, from the same address");
        set_unacknowledged_limit(&opened[0], 1500).unwrap();
        let mut ms = 0u32;
        let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into a live local.
        let rc = unsafe {
            libc::getsockopt(
                opened[0].fd,
                libc::IPPROTO_TCP,
                libc::TCP_USER_TIMEOUT,
                (&mut ms as *mut u32).cast(),
                &mut len,
            )
        };
        assert_eq!((rc, ms), (0, 1500));
        shut_down(&opened[0]).unwrap();
        use std::io::{Read, Write};
        let mut byte = [0u8; 1];
        assert_eq!(accepted.read(&mut byte).unwrap(), 0, "the other end reads end-of-file");
        assert!(client.write_all(b"x").is_err(), "the shut end cannot send");
    }
}
